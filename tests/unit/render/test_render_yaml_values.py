"""Plain scalars YAML 1.1 gives a type PyYAML cannot construct, read as the API server reads them; and a
constructor error names the first bad value in the file, not the shallowest.

kube-prometheus's AlertmanagerConfig CRD has `- =` (match operators) in three enums; PyYAML resolves a plain
`=` to `tag:yaml.org,2002:value` and had no constructor for it, so the whole install failed to render.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops_sync.errors import RenderError
from gitops_sync.render import render
from gitops_sync.render._yaml import load_yaml

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "kube-prometheus" / "manifests"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("a: =\n", {"a": "="}),
        ("- =\n- =~\n- '!='\n", ["=", "=~", "!="]),
        ("a: [=, <<]\n", {"a": ["=", "<<"]}),
        ("a: <<\n", {"a": "<<"}),  # `<<` as a value is text; as a key it still merges (below)
        ("b: &x {c: 1}\na:\n  <<: *x\n  d: =\n", {"b": {"c": 1}, "a": {"c": 1, "d": "="}}),
    ],
)
def test_value_and_merge_scalars_are_strings_as_the_api_server_reads_them(text: str, value: object) -> None:
    assert load_yaml(text, "f.yaml", 1000) == [(1, value)]


def test_the_kube_prometheus_alertmanagerconfig_crd_renders_with_its_equals_enum() -> None:
    crd_file = "0alertmanagerConfigCustomResourceDefinition.yaml"
    data = (FIXTURE / "setup" / crd_file).read_bytes()
    [(_, crd)] = load_yaml(data, crd_file, 10_000_000)
    found: list[list[str]] = []
    stack = [crd]
    while stack:  # every enum that lists `=`
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("enum"), list) and "=" in node["enum"]:
                found.append(node["enum"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    assert found == [["!=", "=", "=~", "!~"]] * 3


def test_a_constructor_error_names_the_first_bad_value_in_the_file(tmp_path: Path) -> None:
    # PyYAML builds level by level: the shallower bad value (line 8) used to be named before the first (7).
    (tmp_path / "c.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  deep:\n    - a: !!int one\n  b: !!int two\n"
    )
    with pytest.raises(RenderError) as err:
        render(tmp_path)
    assert str(err.value) == "c.yaml:7:10, ConfigMap/x: invalid YAML: the value cannot be read as !!int"


def test_keys_and_short_string_values_are_shared_between_documents_long_values_are_not() -> None:
    """The daemon keeps every rendered manifest while Git holds it: 20,000 bench objects took 70 MB with a string
    of their own at each occurrence of `metadata`, `app`, `TCP`..., 38 MB sharing them."""
    long = "x" * 65
    doc = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  mode: fast-{m}\n  blob: {long}\n"
    text = "".join(doc.format(i=i, m=i % 2, long=long) for i in range(4))
    docs = [doc for _n, doc in load_yaml(text, "cms.yaml", 10_000)]
    first, third = docs[0], docs[2]
    assert next(iter(first["metadata"])) is next(iter(third["metadata"]))  # the key "name"
    assert first["data"]["mode"] is third["data"]["mode"]  # "fast-0", written twice in the file
    assert first["data"]["blob"] == third["data"]["blob"] and first["data"]["blob"] is not third["data"]["blob"]
