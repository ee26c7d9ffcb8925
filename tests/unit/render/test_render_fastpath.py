"""YAML files without anchors or tags skip the node-count walk and the copy: same results, same errors."""

from __future__ import annotations

import pytest

from gitops_sync.errors import RenderError
from gitops_sync.render._yaml import load_yaml

DOC = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, on: "yes"}
  annotations:
    created: 2024-01-02
spec:
  replicas: 2
  template:
    spec:
      containers:
      - name: app
        image: x:1
        args: [--a, "--b=1", 3, 1.5, true, null, .inf]
        env: [{name: A, value: "1"}]
---
# empty document
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data:
  1: one
  true: yes
"""


def test_plain_and_full_paths_give_the_same_documents() -> None:
    fast = load_yaml(DOC, "a.yaml", 1_000_000)
    # An anchor nobody uses sends the same text through the full path (walk + copy).
    full = load_yaml(DOC.replace("replicas: 2", "replicas: &r 2"), "a.yaml", 1_000_000)
    assert fast == full
    assert fast == load_yaml(DOC.encode(), "a.yaml", 1_000_000)
    assert [n for n, _ in fast] == [1, 3]
    assert fast[0][1]["metadata"]["annotations"]["created"] == "2024-01-02"
    assert fast[1][1]["data"] == {"1": "one", "true": True}


@pytest.mark.parametrize("anchor", ["", "x: &a 1\n"])
def test_duplicate_keys_are_found_on_both_paths(anchor: str) -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n" + anchor + "data:\n  a: 1\n  a: 2\n"
    line = 7 + (1 if anchor else 0)
    with pytest.raises(RenderError, match=rf"^d\.yaml:{line}:3, ConfigMap/c: invalid YAML: duplicate key 'a'$"):
        load_yaml(text, "d.yaml", 1_000_000)


def test_the_node_bound_still_applies_to_files_large_enough_to_exceed_it() -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: x\n  b: y\n"
    with pytest.raises(RenderError, match="more than 14 YAML nodes"):
        load_yaml(text, "c.yaml", 14)
    assert len(load_yaml(text, "c.yaml", 15)) == 1


def test_an_ampersand_or_bang_inside_a_string_is_just_text() -> None:
    text = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {q: "a&b", r: "hi!"}\n'
    assert load_yaml(text, "c.yaml", 1_000_000)[0][1]["data"] == {"q": "a&b", "r": "hi!"}
