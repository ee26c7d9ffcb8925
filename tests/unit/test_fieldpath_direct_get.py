"""fieldpath.get's allocation-free first route (issue 5) answers exactly as the general search does."""

from __future__ import annotations

from typing import Any

from gitops_sync.plan import fieldpath
from gitops_sync.plan.fieldpath import MISSING, Field, Index, Key, Path, Value, leaves, parse

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
        "template": {"spec": {
            "containers": [
                {"name": "app", "image": "x:1", "ports": [{"containerPort": 80}, {"containerPort": 81,
                                                                                   "protocol": "UDP"}],
                 "args": ["--a", "--b"], "env": [{"name": "A", "value": "1"}, {"name": "B", "value": None}]},
                {"name": "side", "image": "y:2"},
            ],
        }},
    },
}


def _reference(obj: Any, path: Path) -> Any:
    steps = fieldpath._find(obj, path, 0)
    return MISSING if steps is None else fieldpath._follow(obj, steps)


def test_every_leaf_and_every_prefix_of_a_deployment() -> None:
    paths = [p for p, _ in leaves(OBJ)]
    assert len(paths) > 15
    for p in paths:
        for n in range(len(p) + 1):
            prefix = Path(p[:n])
            assert fieldpath.get(OBJ, prefix) == _reference(OBJ, prefix), prefix


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
        Path((Field("spec"), Field("template"), Field("spec"), Field("containers"), Key.of({"name": "app"}),
              Field("ports"), Key.of({"containerPort": 80, "protocol": "TCP"}))),  # protocol defaulted
        Path((Field("spec"), Field("replicas"), Field("deeper"))),
        Path((Field("kind"), Index(0))),
    ]
    for p in cases:
        assert fieldpath.get(OBJ, p) == _reference(OBJ, p), p
    assert fieldpath.get(OBJ, cases[0]) == "web"
    assert fieldpath.get(OBJ, cases[1]) == "nested"
    assert fieldpath.get(OBJ, cases[2]) is None
    assert fieldpath.get(OBJ, cases[8]) == {"containerPort": 80}
