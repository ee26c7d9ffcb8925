"""fieldsv1.py: managedFields tries decoded into owned paths, every element kind, bad keys refused."""

from __future__ import annotations

from typing import Any

import pytest

from gitops_sync.plan.fieldpath.element import Field, Index, Key, Path, Value
from gitops_sync.plan.fieldpath.fieldsv1 import parse_fields_v1
from gitops_sync.plan.fieldpath.notation import parse


def test_parse_fields_v1_all_element_kinds() -> None:
    paths = parse_fields_v1(
        {
            "f:metadata": {"f:finalizers": {".": {}, 'v:"a"': {}}},
            "f:spec": {
                "f:ports": {'k:{"protocol":"TCP","port":80}': {".": {}, "f:port": {}}},
                "f:args": {"i:0": {}, "i:1": {}},
                "f:selector": {},
                "f:template": {"f:spec": {"f:x": {}}},
            },
        }
    )
    assert {p.format() for p in paths} == {
        ".metadata.finalizers",
        '.metadata.finalizers[="a"]',
        '.spec.ports[port=80,protocol="TCP"]',
        '.spec.ports[port=80,protocol="TCP"].port',
        ".spec.args[0]",
        ".spec.args[1]",
        ".spec.selector",
        ".spec.template.spec.x",
    }
    # nodes without "." are not owned themselves
    assert parse(".spec") not in paths
    assert parse(".spec.template") not in paths
    assert Path([Field("spec"), Field("args"), Index(0)]) in paths
    assert Path([Field("metadata"), Field("finalizers"), Value.of("a")]) in paths
    assert Path([Field("spec"), Field("ports"), Key.of({"port": 80, "protocol": "TCP"})]) in paths


def test_parse_fields_v1_keeps_dotted_names_whole() -> None:
    paths = parse_fields_v1({"f:metadata": {"f:labels": {"f:app.kubernetes.io/name": {}}}})
    assert paths == {Path([Field("metadata"), Field("labels"), Field("app.kubernetes.io/name")])}


@pytest.mark.parametrize("bad", [{"x:1": {}}, {"nocolon": {}}, {"i:one": {}}, {"k:[1]": {}}])
def test_parse_fields_v1_rejects_unknown_keys(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="unknown FieldsV1 key"):
        parse_fields_v1(bad)
