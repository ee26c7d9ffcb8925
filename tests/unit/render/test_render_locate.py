"""Where Git says it: positions of values in a YAML document, Helm's `# Source:`, kustomize's origin."""

from __future__ import annotations

from gitops_sync.render.locate import helm_sources, positions, take_origin

TEXT = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
data:
  k: v
---
apiVersion: apps/v1
kind: Deployment
spec:
  replicas: 2
  template:
    spec:
      containers:
      - name: web
        image: nginx
      - image: other
"""


def test_positions_of_values_in_the_nth_document() -> None:
    first = positions(TEXT, 1)
    assert first[("data", "k")] == (5, 6)
    second = positions(TEXT, 2)
    assert second[("spec", "replicas")] == (10, 13)
    assert second[("spec", "template", "spec", "containers", ("name", "web"), "image")] == (15, 16)
    assert second[("spec", "template", "spec", "containers", 1, "image")] == (16, 16)
    assert positions(TEXT, 3) == {} and positions("a: [", 1) == {}


def test_an_alias_is_reported_where_it_is_written_and_never_expanded() -> None:
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    found = positions(bomb, 1)
    assert found[("a",)] == (1, 4) and len(found) < 12


def test_helm_sources_by_document_number() -> None:
    out = "---\n# Source: hello/templates/cm.yaml\na: 1\n---\n# Source: hello/templates/deploy.yaml\nb: 2\n"
    assert helm_sources(out) == {1: "hello/templates/cm.yaml", 2: "hello/templates/deploy.yaml"}


def test_kustomize_origin_is_read_and_removed() -> None:
    m = {"metadata": {"name": "x", "annotations": {"config.kubernetes.io/origin": "path: base/cm.yaml\n"}}}
    assert take_origin(m) == "base/cm.yaml" and "annotations" not in m["metadata"]
    assert take_origin({"metadata": {"name": "x"}}) == ""
