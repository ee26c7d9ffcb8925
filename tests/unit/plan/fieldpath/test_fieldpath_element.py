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


def test_a_key_or_set_element_is_spelled_once_however_many_leaves_and_objects_print_it() -> None:
    from gitops_sync.plan.fieldpath import element

    key, value = Key.of({"name": "web", "port": 8080}), Value.of("example.com/x")
    first = (key.format(), value.format())
    hits = element._format_key.cache_info().hits + element._format_value.cache_info().hits
    again = (Key.of({"port": 8080, "name": "web"}).format(), Value.of("example.com/x").format())
    assert first == again == ('[name="web",port=8080]', '[="example.com/x"]')
    assert element._format_key.cache_info().hits + element._format_value.cache_info().hits == hits + 2
    assert Key.of({"name": "api"}).format() == '[name="api"]'  # another value, another spelling
