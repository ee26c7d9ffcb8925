"""Ignore rules: the flag and file syntax, their validation, and what they do to an apply body."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.errors import RenderError
from gitops_sync.plan.ignore import ALWAYS, IF_OWNED, Selector, apply_rules, load_file, parse_flag, parse_path
from gitops_sync.resource import ObjectKey

KEY = ObjectKey("apps", "Deployment", "ns", "web")


def test_paths_and_json_pointers_become_server_notation() -> None:
    assert parse_path("/spec/replicas") == ".spec.replicas"
    assert parse_path("/metadata/annotations/a~1b") == ".metadata.annotations.a/b"
    assert parse_path('.spec.template.spec.containers[name="web"].image') == (
        '.spec.template.spec.containers[name="web"].image'
    )
    for bad in ("spec.replicas", "/", "/spec//x"):
        with pytest.raises(ValueError):
            parse_path(bad)


def test_flag_syntax() -> None:
    rule = parse_flag("apps/Deployment:*:.spec.replicas")
    assert rule.selector == Selector(group="apps", kind="Deployment", namespace="*", name="*")
    assert rule.paths == (".spec.replicas",) and rule.mode == IF_OWNED
    rule = parse_flag("core/ConfigMap:team-a/gen-*:/data/generated:always")
    assert rule.selector == Selector(group="", kind="ConfigMap", namespace="team-a", name="gen-*")
    assert rule.paths == (".data.generated",) and rule.mode == ALWAYS
    assert parse_flag("Deployment:web:.spec.replicas").selector.group == "*"
    with pytest.raises(ValueError, match="expected"):
        parse_flag("Deployment:web")


def test_selector_globs_and_labels() -> None:
    s = Selector(kind="Deploy*", name="w*", labels=(("team", "a"),))
    assert s.matches(KEY, {"metadata": {"labels": {"team": "a"}}})
    assert not s.matches(KEY, {"metadata": {"labels": {"team": "b"}}})
    assert not s.matches(ObjectKey("apps", "StatefulSet", "ns", "web"), {"metadata": {"labels": {"team": "a"}}})


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / ".gitops-sync.yaml").write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ignore: {a: 1}\n", "must be a list"),
        ("rules: []\n", "expected a mapping with the key `ignore`"),
        ("ignore:\n  - paths: [.spec.replicas]\n    mode: sometimes\n", "ignore[0]: `mode`"),
        ("ignore:\n  - target: {kind: Deployment}\n", "ignore[0]: a rule needs `paths`"),
        ("ignore:\n  - paths: [.a]\n    colour: red\n", "ignore[0]: unknown key"),
        ("ignore:\n  - paths: [.a]\n  - target: {kind: [x]}\n    paths: [.a]\n", "ignore[1]: `target.kind`"),
        ("ignore:\n  - paths: [.a\n", "invalid YAML: while parsing a flow sequence started at line 2, column 12"),
    ],
)
def test_a_bad_rules_file_is_a_render_error_naming_it(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(RenderError, match=r"\.gitops-sync\.yaml") as err:
        load_file(write(tmp_path, text), tmp_path)
    assert says in str(err.value)


def alias_bomb(levels: int) -> str:
    """`mode:` a list of `levels` anchors, each ten aliases of the one before: 10**levels nodes expanded."""
    anchors = ["&a0 [x, x, x, x, x, x, x, x, x, x]"]
    anchors += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return f"ignore:\n  - paths: [.spec.replicas]\n    mode: [{', '.join(anchors)}]\n"


def test_an_alias_bomb_in_the_rules_file_is_refused_before_it_expands(tmp_path: Path) -> None:
    """Read with plain yaml.safe_load, 7 levels (352 bytes) made a 58 MB error message in 4 s, 8 levels ran
    out of memory: the bounded loader counts the expansion and refuses it, naming the file."""
    started = time.perf_counter()
    with pytest.raises(RenderError) as err:
        load_file(write(tmp_path, alias_bomb(8)), tmp_path)
    assert time.perf_counter() - started < 1
    assert str(err.value) == (
        ".gitops-sync.yaml: document 1 expands to more than 100000 YAML nodes in this file (aliases expanded); "
        "refusing to load it"
    )


@pytest.mark.parametrize(
    ("depth", "says"),
    [
        (150, ":3:58: invalid YAML: document 1 is nested more than 100 levels deep"),
        (5000, ":1:1008: invalid YAML: while increasing flow level"),
    ],
)
def test_deep_nesting_in_the_rules_file_is_an_error_not_a_recursion_error(
    tmp_path: Path, depth: int, says: str
) -> None:
    text = "ignore:\n- paths: [.a]\n  mode: " if depth < 1000 else "ignore: "
    with pytest.raises(RenderError) as err:
        load_file(write(tmp_path, text + "[" * depth + "]" * depth + "\n"), tmp_path)
    assert str(err.value).startswith(".gitops-sync.yaml" + says), err.value


def test_a_rules_file_past_the_size_limit_is_refused(tmp_path: Path) -> None:
    text = "ignore:\n  - paths: [.spec.replicas]\n" + "# padding\n" * 120_000
    with pytest.raises(RenderError, match=r"^\.gitops-sync\.yaml: file is larger than the 1048576-byte limit$"):
        load_file(write(tmp_path, text), tmp_path)


def test_a_wrong_mode_is_named_by_its_type_not_quoted_whole(tmp_path: Path) -> None:
    with pytest.raises(RenderError) as err:
        load_file(
            write(tmp_path, "ignore:\n  - paths: [.a]\n    mode: [" + ", ".join(["x" * 50] * 1000) + "]\n"), tmp_path
        )
    assert str(err.value).endswith("`mode` must be one of ['if-owned-by-others', 'always'], not a list")


def test_the_rendered_root_file_wins_over_the_repository_root(tmp_path: Path) -> None:
    write(tmp_path, "ignore:\n  - paths: [.top]\n")
    sub = tmp_path / "apps"
    sub.mkdir()
    assert load_file(sub, tmp_path)[0].paths == (".top",)
    write(sub, "ignore:\n  - paths: [/sub]\n    mode: always\n")
    (rule,) = load_file(sub, tmp_path)
    assert rule.paths == (".sub",) and rule.mode == ALWAYS and rule.origin == "apps/.gitops-sync.yaml"
    assert load_file(tmp_path / "nothing", None) == []


def mf(manager: str, fields: dict[str, Any], op: str = "Update", sub: str = "") -> dict[str, Any]:
    e = {"manager": manager, "operation": op, "fieldsType": "FieldsV1", "fieldsV1": fields}
    if sub:
        e["subresource"] = sub
    return e


DESIRED = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "ns"},
    "spec": {"replicas": 2, "paused": False},
}


def live(replicas: int, owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        **DESIRED,
        "metadata": {**DESIRED["metadata"], "managedFields": owners},
        "spec": {"replicas": replicas, "paused": False},
    }


OURS = mf("gitops-sync", {"f:spec": {"f:replicas": {}, "f:paused": {}}}, op="Apply")


def test_if_owned_by_others_drops_the_field_only_while_someone_else_owns_it() -> None:
    rule = parse_flag("Deployment:*:.spec.replicas")
    scaled = live(
        5,
        [
            mf("gitops-sync", {"f:spec": {"f:paused": {}}}, op="Apply"),
            mf("kubectl", {"f:spec": {"f:replicas": {}}}, sub="scale"),
        ],
    )
    out = apply_rules(KEY, DESIRED, scaled, [rule], "gitops-sync")
    assert "replicas" not in out.manifest["spec"] and DESIRED["spec"]["replicas"] == 2, "a copy"
    assert [(i.path, i.desired, i.live, i.manager, i.actor) for i in out.ignored] == [
        (".spec.replicas", 2, 5, "kubectl", "kubectl scale")
    ]
    ours = apply_rules(KEY, DESIRED, live(5, [OURS]), [rule], "gitops-sync")
    assert ours.manifest is DESIRED and ours.ignored == [], "nobody else owns it: Git's value applies"
    assert apply_rules(KEY, DESIRED, None, [rule], "gitops-sync").manifest is DESIRED, "created with Git's value"


def test_always_keeps_the_live_value_when_only_we_own_it() -> None:
    rule = parse_flag("Deployment:*:.spec.replicas:always")
    out = apply_rules(KEY, DESIRED, live(5, [OURS]), [rule], "gitops-sync")
    assert out.manifest["spec"]["replicas"] == 5
    assert [(i.path, i.desired, i.live, i.manager, i.mode) for i in out.ignored] == [
        (".spec.replicas", 2, 5, "", ALWAYS)
    ]
    same = apply_rules(KEY, DESIRED, live(2, [OURS]), [rule], "gitops-sync")
    assert same.ignored == [], "equal values: nothing to say"


@pytest.mark.parametrize("text", ["ConfigMap:*:.data.a:sometimes", "apps/Deployment:*:/spec/replicas:Always"])
def test_a_misspelt_mode_is_refused_not_folded_into_the_path(text: str) -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        parse_flag(text)


def test_a_colon_inside_a_quoted_list_key_is_still_a_path() -> None:
    rule = parse_flag('apps/Deployment:*:.spec.template.spec.containers[name="a:b"].image')
    assert rule.paths == ('.spec.template.spec.containers[name="a:b"].image',) and rule.mode == "if-owned-by-others"
