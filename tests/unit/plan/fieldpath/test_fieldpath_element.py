"""element.py: path elements compare by canonical JSON, and Path's helpers keep returning Paths."""

from __future__ import annotations

from gitops_sync.plan.fieldpath.element import Field, Key, Path, Value
from gitops_sync.plan.fieldpath.notation import parse


def test_key_values_json_exact() -> None:
    assert Key.of({"port": 80}) == Key.of({"port": 80.0})  # integral floats are the same JSON number
    assert Key.of({"port": 80}) != Key.of({"port": "80"})  # intOrString: different items
    assert Key.of({"a": True}) != Key.of({"a": 1})
    assert Key.of({"port": 80, "protocol": "TCP"}).fields == {"port": 80, "protocol": "TCP"}
    assert Value.of("x").value == "x"


def test_path_helpers() -> None:
    path = parse('.spec.containers[name="api"].image')
    assert path.parent.format() == '.spec.containers[name="api"]'
    assert [p.format() for p in path.prefixes()] == ['.spec.containers[name="api"]', ".spec.containers", ".spec"]
    assert path.startswith(parse(".spec.containers"))
    assert not path.startswith(parse(".spec.initContainers"))
    assert path.child(Field("x")).format() == '.spec.containers[name="api"].image.x'
    assert repr(parse(".a")) == "Path('.a')"
    assert isinstance(path.parent, Path)
