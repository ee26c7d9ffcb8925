"""walk.py: leaves of an object, get/resolve/remove along printed paths.

The second half checks that get's allocation-free first route answers exactly as the general search does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from gitops_sync.plan.fieldpath import walk
from gitops_sync.plan.fieldpath.element import Field, Index, Key, Path, Value
from gitops_sync.plan.fieldpath.notation import parse
from gitops_sync.plan.fieldpath.walk import MISSING, get, leaf_paths, leaves, remove, resolve

DEPLOY: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "minha-api",
        "labels": {"app": "short", "app.kubernetes.io/name": "minha-api"},
        "finalizers": ["example.com/a", "example.com/b"],
    },
    "spec": {
        "replicas": 3,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "api",
                        "image": "ghcr.io/x/api:1.0",
                        "args": ["--port", "8080"],
                        "ports": [{"containerPort": 8080, "name": "http"}],
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    },
                    {"name": "sidecar", "image": "envoy:1"},
                ]
            }
        },
    },
}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (".spec.replicas", 3),
        (".metadata.labels.app", "short"),
        (".metadata.labels.app.kubernetes.io/name", "minha-api"),
        ('.spec.template.spec.containers[name="api"].image', "ghcr.io/x/api:1.0"),
        ('.spec.template.spec.containers[name="sidecar"].image', "envoy:1"),
        ('.spec.template.spec.containers[name="api"].env[name="B"].value', "2"),
        # desired port without protocol is the server's protocol="TCP" item
        ('.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].name', "http"),
        ('.spec.template.spec.containers[name="api"].args[1]', "8080"),
        ('.metadata.finalizers[="example.com/b"]', "example.com/b"),
        (".spec.missing", MISSING),
        ('.spec.template.spec.containers[name="nope"].image', MISSING),
        ('.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="UDP"].name', MISSING),
        ('.spec.template.spec.containers[name="api"].args[2]', MISSING),
        ('.metadata.finalizers[="example.com/z"]', MISSING),
        (".spec.replicas.deeper", MISSING),
        (".metadata.labels.app.kubernetes", MISSING),
        ('.spec[name="x"]', MISSING),
    ],
)
def test_get(path: str, value: Any) -> None:
    assert get(DEPLOY, path) == value
    assert get(DEPLOY, parse(path)) == value


def test_get_distinguishes_null_from_missing() -> None:
    assert get({"a": None}, ".a") is None
    assert get({"a": None}, ".b") is MISSING
    assert not MISSING
    assert repr(MISSING) == "MISSING"


def test_dotted_keys_prefer_exact_elements_then_rejoin() -> None:
    obj = {"data": {"config": {"yaml": "nested"}, "config.yaml": "flat"}}
    assert get(obj, ".data.config.yaml") == "nested"  # exact elements win
    assert get(obj, Path([Field("data"), Field("config.yaml")])) == "flat"
    assert resolve(DEPLOY, ".metadata.labels.app.kubernetes.io/name") == Path(
        [Field("metadata"), Field("labels"), Field("app.kubernetes.io/name")]
    )
    assert resolve(DEPLOY, ".nope") is None
    resolved = resolve(DEPLOY, '.spec.template.spec.containers[name="api"].image')
    assert resolved is not None and resolved.format() == '.spec.template.spec.containers[name="api"].image'


@pytest.mark.parametrize(
    ("path", "check"),
    [
        (".spec.replicas", lambda o: "replicas" not in o["spec"]),
        (".metadata.labels.app.kubernetes.io/name", lambda o: o["metadata"]["labels"] == {"app": "short"}),
        (
            '.spec.template.spec.containers[name="api"].image',
            lambda o: o["spec"]["template"]["spec"]["containers"][0].keys() == {"name", "args", "ports", "env"},
        ),
        (
            '.spec.template.spec.containers[name="sidecar"]',
            lambda o: [c["name"] for c in o["spec"]["template"]["spec"]["containers"]] == ["api"],
        ),
        (
            '.spec.template.spec.containers[name="api"].name',  # a key field: the item keeps it
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["name"] == "api",
        ),
        (
            '.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].name',
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 8080}],
        ),
        (
            '.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].containerPort',
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] == 8080,
        ),
        ('.metadata.finalizers[="example.com/a"]', lambda o: o["metadata"]["finalizers"] == ["example.com/b"]),
        (
            '.spec.template.spec.containers[name="api"].args[0]',
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["args"] == ["8080"],
        ),
        (".spec.absent", lambda o: o == DEPLOY),
        ("", lambda o: o == DEPLOY),
    ],
)
def test_remove(path: str, check: Any) -> None:
    before = copy.deepcopy(DEPLOY)
    out = remove(DEPLOY, path)
    assert check(out)
    assert before == DEPLOY  # never mutates its input
    assert out is not DEPLOY


@pytest.mark.parametrize(
    ("obj", "path", "expected"),
    [
        ({"metadata": {"name": "x", "labels": {"a": "1"}}}, ".metadata.labels.a", {"metadata": {"name": "x"}}),
        ({"spec": {"replicas": 3}, "kind": "D"}, ".spec.replicas", {"kind": "D"}),
        ({"spec": {"s": {"r": {"m": 1}}, "k": 1}}, ".spec.s.r.m", {"spec": {"k": 1}}),
        ({"metadata": {"finalizers": ["a"]}}, '.metadata.finalizers[="a"]', {}),
        ({"c": [{"name": "a", "x": {"y": 1}}]}, '.c[name="a"].x.y', {"c": [{"name": "a"}]}),
        ({"c": [{"name": "a", "x": 1}]}, '.c[name="a"].x', {"c": [{"name": "a"}]}),
        ({"a": {"b": {}, "c": 1}}, ".a.c", {"a": {"b": {}}}),  # an empty map we set ourselves stays
    ],
)
def test_remove_prunes_what_it_emptied(obj: dict[str, Any], path: str, expected: dict[str, Any]) -> None:
    assert remove(obj, path) == expected


def test_remove_keeps_everything_else() -> None:
    out = remove(DEPLOY, ".spec.replicas")
    expected = copy.deepcopy(DEPLOY)
    del expected["spec"]["replicas"]
    assert out == expected


def test_leaf_paths_of_a_deployment() -> None:
    assert leaf_paths(DEPLOY) == [
        ".apiVersion",
        ".kind",
        ".metadata.name",
        ".metadata.labels.app",
        ".metadata.labels.app.kubernetes.io/name",
        '.metadata.finalizers[="example.com/a"]',
        '.metadata.finalizers[="example.com/b"]',
        ".spec.replicas",
        '.spec.template.spec.containers[name="api"].name',
        '.spec.template.spec.containers[name="api"].image',
        '.spec.template.spec.containers[name="api"].args',
        '.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].containerPort',
        '.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].name',
        '.spec.template.spec.containers[name="api"].env[name="A"].name',
        '.spec.template.spec.containers[name="api"].env[name="A"].value',
        '.spec.template.spec.containers[name="api"].env[name="B"].name',
        '.spec.template.spec.containers[name="api"].env[name="B"].value',
        '.spec.template.spec.containers[name="sidecar"].name',
        '.spec.template.spec.containers[name="sidecar"].image',
    ]


def test_leaves_values_and_special_leaves() -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "spec": {
            "ports": [{"port": 80, "targetPort": "http"}, {"port": 53, "protocol": "UDP"}],
            "selector": {},
            "externalIPs": [],
        },
    }
    got = {p.format(): v for p, v in leaves(service)}
    assert got['.spec.ports[port=80,protocol="TCP"].targetPort'] == "http"
    assert got['.spec.ports[port=53,protocol="UDP"].protocol'] == "UDP"
    assert got[".spec.selector"] == {}  # an empty map we set is a field we own
    assert got[".spec.externalIPs"] == []
    # every leaf path resolves back to its value
    for path, value in leaves(DEPLOY):
        assert get(DEPLOY, path) == value


def test_leaves_of_a_kindless_fragment() -> None:
    assert leaf_paths({"spec": {"ports": [{"port": 1}]}}) == ['.spec.ports[port=1,protocol="TCP"].port']


def _frozen(value: Any) -> Any:
    """The same data with every map a read-only Mapping that is not a dict."""
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_frozen(v) for v in value]
    return value


def test_any_mapping_is_walked_as_a_map_not_only_dict() -> None:
    frozen = _frozen(DEPLOY)
    assert not isinstance(frozen, dict) and isinstance(frozen, Mapping)
    assert leaf_paths(frozen) == leaf_paths(DEPLOY)
    for path, value in leaves(frozen):
        assert get(frozen, path) == value
        assert get(DEPLOY, path) == value
    assert get(frozen, ".metadata.labels.app.kubernetes.io/name") == "minha-api"
    assert get(frozen, '.spec.template.spec.containers[name="api"].env[name="B"].value') == "2"
    assert get(frozen, ".spec.replicas.deeper") is MISSING
    assert [p.format() for p, _ in leaves(_frozen({"spec": {"selector": {}}}))] == [".spec.selector"]


# --- get: the direct route agrees with the search ---

OBJ: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "web",
        "labels": {"app.kubernetes.io/name": "web", "app": {"kubernetes": "nested"}, "null": None},
        "finalizers": ["a", "b"],
    },
    "spec": {
        "replicas": 0,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "x:1",
                        "ports": [{"containerPort": 80}, {"containerPort": 81, "protocol": "UDP"}],
                        "args": ["--a", "--b"],
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": None}],
                    },
                    {"name": "side", "image": "y:2"},
                ],
            }
        },
    },
}


def _reference(obj: Any, path: Path) -> Any:
    steps = walk._find(obj, path, 0)
    return MISSING if steps is None else walk._follow(obj, steps)


def test_every_leaf_and_every_prefix_of_a_deployment() -> None:
    paths = [p for p, _ in leaves(OBJ)]
    assert len(paths) > 15
    for p in paths:
        for n in range(len(p) + 1):
            prefix = Path(p[:n])
            assert get(OBJ, prefix) == _reference(OBJ, prefix), prefix


def test_misses_dotted_keys_indexes_and_values_agree_with_the_search() -> None:
    cases = [
        parse(".metadata.labels.app.kubernetes.io/name"),  # dot-split key: found only by the search
        Path((Field("metadata"), Field("labels"), Field("app"), Field("kubernetes"))),  # the nested map wins
        Path((Field("metadata"), Field("labels"), Field("null"))),  # a null value is a value, not MISSING
        Path((Field("metadata"), Field("finalizers"), Value.of("b"))),
        Path((Field("metadata"), Field("finalizers"), Value.of("c"))),
        Path((Field("spec"), Field("template"), Field("spec"), Field("containers"), Index(1), Field("image"))),
        Path((Field("spec"), Field("template"), Field("spec"), Field("containers"), Index(5))),
        Path((Field("spec"), Field("template"), Field("spec"), Field("containers"), Key.of({"name": "nope"}))),
        Path(
            (
                Field("spec"),
                Field("template"),
                Field("spec"),
                Field("containers"),
                Key.of({"name": "app"}),
                Field("ports"),
                Key.of({"containerPort": 80, "protocol": "TCP"}),
            )
        ),  # protocol defaulted
        Path((Field("spec"), Field("replicas"), Field("deeper"))),
        Path((Field("kind"), Index(0))),
    ]
    for p in cases:
        assert get(OBJ, p) == _reference(OBJ, p), p
    assert get(OBJ, cases[0]) == "web"
    assert get(OBJ, cases[1]) == "nested"
    assert get(OBJ, cases[2]) is None
    assert get(OBJ, cases[8]) == {"containerPort": 80}
