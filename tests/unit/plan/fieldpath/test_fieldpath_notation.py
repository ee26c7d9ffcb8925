"""notation.py: the server's printed paths read back, printed again, and Go-quoted names decoded."""

from __future__ import annotations

from typing import Any

import pytest

from gitops_sync.plan.fieldpath.element import Field, Index, Key, Path, Value
from gitops_sync.plan.fieldpath.notation import format_path, go_unquote, parse

# Paths exactly as the API server prints them (structured-merge-diff Path.String()).
SERVER_PATHS = [
    ".spec.replicas",
    ".metadata.labels.app",
    ".metadata.labels.app.kubernetes.io/name",
    ".metadata.annotations.kubectl.kubernetes.io/last-applied-configuration",
    '.spec.template.spec.containers[name="api"].image',
    '.spec.template.spec.containers[name="api"].env[name="LOG_LEVEL"].value',
    '.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].name',
    '.spec.ports[port=80,protocol="TCP"].targetPort',
    '.metadata.finalizers[="kubernetes.io/pvc-protection"]',
    ".spec.template.spec.containers[0].args[1]",
    '.metadata.ownerReferences[uid="6f1c2a9e-1b2c-4d5e-8f90-123456789abc"]',
    '.spec.topologySpreadConstraints[topologyKey="zone",whenUnsatisfiable="DoNotSchedule"]',
    ".spec.x[=42]",
    ".spec.x[=1.5]",
    ".spec.x[=true]",
    ".spec.x[=null]",
    '.data.a[="say \\"hi\\"\\n"]',
    '.spec.k[a=-3,b="é"]',
    "",
]


@pytest.mark.parametrize("text", SERVER_PATHS)
def test_parse_format_round_trip(text: str) -> None:
    path = parse(text)
    assert path.format() == text
    assert str(path) == text
    assert format_path(tuple(path)) == text
    assert Path.parse(text) == path


@pytest.mark.parametrize(
    ("text", "elements"),
    [
        (".spec.replicas", [Field("spec"), Field("replicas")]),
        ('.a[name="api"].b', [Field("a"), Key.of({"name": "api"}), Field("b")]),
        ('.p[protocol="TCP",port=80]', [Field("p"), Key.of({"port": 80, "protocol": "TCP"})]),
        ('.f[="x"]', [Field("f"), Value.of("x")]),
        (".f[=7]", [Field("f"), Value.of(7)]),
        (".args[12]", [Field("args"), Index(12)]),
        ('.k[a="x\\ty",b=false,c=null,d=2.5]', [Field("k"), Key.of({"a": "x\ty", "b": False, "c": None, "d": 2.5})]),
    ],
)
def test_parse_elements(text: str, elements: list[Any]) -> None:
    assert list(parse(text)) == elements


def test_unsorted_key_fields_are_canonicalised() -> None:
    # The server sorts key fields by name; a hand-written path in another order means the same item.
    assert parse('.p[protocol="TCP",port=80]').format() == '.p[port=80,protocol="TCP"]'


@pytest.mark.parametrize(
    ("quoted", "text"),
    [('"plain"', "plain"), ('"a\\"b"', 'a"b'), ('"\\x01\\u00e9\\U0001f600"', "\x01é😀"), ('"\\101"', "A")],
)
def test_go_unquote(quoted: str, text: str) -> None:
    assert go_unquote(quoted) == text


@pytest.mark.parametrize("bad", ["spec", ".a[", '.a[name="x"', ".a[name=]x", ".a[=bogus]", '.a["x"]', '.a[="\\q"]'])
def test_parse_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid field path"):
        parse(bad)
