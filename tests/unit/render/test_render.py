"""gitops_sync.render: the walk, file formats, validation and duplicates (no kubectl/helm needed here)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from gitops_sync.errors import RenderError
from gitops_sync.render import RenderOptions, render, to_yaml
from gitops_sync.resource import DesiredObject

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "render"
CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def summary(objs: list[DesiredObject]) -> list[tuple[str, str, str]]:
    return [(o.kind, o.key.name, o.origin) for o in objs]


# --- the walk ----------------------------------------------------------------------------------------


def test_fixture_tree_in_sorted_order_with_lists_json_and_multi_docs() -> None:
    objs = render(FIXTURES / "tree")
    assert summary(objs) == [
        ("Namespace", "shop", "00-namespace.yaml#1"),
        ("ConfigMap", "one", "apps/list.yml#1 items[0]"),
        ("ConfigMap", "two", "apps/list.yml#1 items[1]"),
        ("ServiceAccount", "robot", "apps/objects.json#1"),
        ("ClusterRole", "reader", "apps/objects.json#2"),
        ("Deployment", "web", "apps/web/deploy.yaml#2"),
        ("Service", "web", "apps/web/deploy.yaml#3"),
        ("Secret", "token", "zz/secretlist.yaml#1 items[0]"),
    ]
    assert objs[5].manifest["spec"] == {"replicas": 2}


def test_render_is_deterministic() -> None:
    assert [o.manifest for o in render(FIXTURES / "tree")] == [o.manifest for o in render(FIXTURES / "tree")]


def test_hidden_and_foreign_files_are_ignored(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            ".github/ci.yaml": "on: push\n",
            ".git/config.yaml": "x: 1\n",
            ".swap.yaml": "broken: [\n",
            "notes.txt": "kind: Nope\n",
            "values.yaml.bak": "kind: Nope\n",
            "a/cm.YAML": CM.format(name="upper"),
            "a/cm.yml": CM.format(name="yml"),
        },
    )
    assert [o.key.name for o in render(tmp_path)] == ["upper", "yml"]


def test_empty_tree_and_empty_documents_render_nothing(tmp_path: Path) -> None:
    write(tmp_path, {"empty.yaml": "", "comments.yaml": "# nothing\n", "nulls.yaml": "---\n---\n~\n---\n"})
    assert render(tmp_path) == []


def test_a_list_of_lists_is_flattened(tmp_path: Path) -> None:
    inner = {"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(CM.format(name="deep"))]}
    write(tmp_path, {"l.yaml": yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [inner]})})
    assert summary(render(tmp_path)) == [("ConfigMap", "deep", "l.yaml#1 items[0] items[0]")]


def test_a_kind_ending_in_list_without_items_is_an_object(tmp_path: Path) -> None:
    write(tmp_path, {"a.yaml": "apiVersion: example.com/v1\nkind: AllowList\nmetadata: {name: a}\n"})
    assert summary(render(tmp_path)) == [("AllowList", "a", "a.yaml#1")]


def test_render_of_a_missing_directory_fails(tmp_path: Path) -> None:
    with pytest.raises(RenderError, match="not a directory"):
        render(tmp_path / "absent")


def test_namespaces_are_not_defaulted_and_yaml_is_read_as_json_would_be(tmp_path: Path) -> None:
    write(
        tmp_path,
        {"cm.yaml": CM.format(name="c") + "data:\n  date: 2024-01-01\n  'on': yes\n  bin: !!binary aGk=\n"},
    )
    [obj] = render(tmp_path)
    assert "namespace" not in obj.manifest["metadata"]
    assert obj.manifest["data"] == {"date": "2024-01-01", "on": True, "bin": "aGk="}
    json.dumps(obj.manifest)  # plain JSON values only


def test_yaml_11_keys_become_strings_as_kubectl_reads_them(tmp_path: Path) -> None:
    write(tmp_path, {"cm.yaml": CM.format(name="c") + "data:\n  on: a\n  1: b\n  null: c\n"})
    assert render(tmp_path)[0].manifest["data"] == {"true": "a", "1": "b", "null": "c"}


def test_aliases_are_expanded_into_independent_copies(tmp_path: Path) -> None:
    text = CM.format(name="c") + "  labels: &l {a: b}\n  annotations: *l\n"
    write(tmp_path, {"cm.yaml": text})
    meta = render(tmp_path)[0].manifest["metadata"]
    assert meta["labels"] == meta["annotations"] == {"a": "b"}
    meta["labels"]["x"] = "y"  # later stages mutate objects: aliased nodes must not be shared
    assert meta["annotations"] == {"a": "b"}


# --- validation --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: ConfigMap\nmetadata: {name: c}\n", r"cm\.yaml#1, ConfigMap/c: missing apiVersion"),
        ("apiVersion: v1\nmetadata: {name: c}\n", r"cm\.yaml#1, c: missing kind"),
        ("apiVersion: v1\nkind: ConfigMap\n", r"cm\.yaml#1, ConfigMap: missing metadata\.name"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ''}\n", r"ConfigMap: missing metadata\.name"),
        ("apiVersion: ''\nkind: ConfigMap\nmetadata: {name: c}\n", r"ConfigMap/c: missing apiVersion"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 12}\n", r"metadata\.name must be a string"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: [x]\n", r"metadata must be a mapping"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: 5}\n", r"namespace must be a string"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {generateName: job-}\n", r"Pod/job-: metadata\.generateName"),
        ("- a\n- b\n", r"cm\.yaml#1: expected a Kubernetes object \(a mapping\), found a list"),
        ("just text\n", r"cm\.yaml#1: expected a Kubernetes object \(a mapping\), found a string"),
        ("kind: Foo\n", r"cm\.yaml#1, Foo: missing apiVersion; missing metadata\.name"),
    ],
)
def test_invalid_objects_name_file_document_and_object(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path, {"cm.yaml": text})
    with pytest.raises(RenderError, match=message):
        render(tmp_path)


def test_error_names_the_right_document(tmp_path: Path) -> None:
    write(tmp_path, {"multi.yaml": CM.format(name="a") + "---\n" + CM.format(name="b") + "---\nkind: Secret\n"})
    with pytest.raises(RenderError, match=r"^multi\.yaml#3, Secret: missing apiVersion") as err:
        render(tmp_path)
    assert err.value.file == "multi.yaml#3" and err.value.obj == "Secret"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "l.yaml",
            "apiVersion: v1\nkind: List\nitems:\n- {kind: ConfigMap, metadata: {name: x}}\n",
            r"^l\.yaml#1 items\[0\], ConfigMap/x: missing apiVersion$",
        ),
        ("tab.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n\tname: x\n", r"^tab\.yaml:4:1: invalid YAML"),
        (
            "d.yaml",
            CM.format(name="c") + "data:\n  a: 1\n  a: 2\n",
            r"^d\.yaml:7:3, ConfigMap/c: invalid YAML: duplicate key 'a'$",
        ),
        ("t.yaml", CM.format(name="c") + "data: !Ref other\n", r"^t\.yaml:5:7, ConfigMap/c: invalid YAML: .*'!Ref'"),
        ("r.yaml", CM.format(name="c") + "data: &d {self: *d}\n", r"^r\.yaml:5:7, ConfigMap/c: recursive YAML alias"),
        ("o.json", '{\n  "apiVersion": "v1",\n  "kind": ConfigMap\n}\n', r"^o\.json:3:11: invalid JSON"),
        (
            "o.json",
            '{"apiVersion": "v1", "kind": "A", "kind": "B", "metadata": {"name": "x"}}',
            r"^o\.json: invalid JSON: duplicate key 'kind'$",
        ),
    ],
)
def test_bad_files_are_named_with_position(tmp_path: Path, name: str, text: str, message: str) -> None:
    write(tmp_path, {name: text})
    with pytest.raises(RenderError, match=message):
        render(tmp_path)


def test_invalid_yaml_gives_file_line_and_column(tmp_path: Path) -> None:
    write(tmp_path, {"bad.yaml": CM.format(name="c") + "data:\n  key: [unclosed\n  other: 1\n"})
    with pytest.raises(
        RenderError,
        match=r"^bad\.yaml:7:8: invalid YAML: while parsing a flow sequence started at line 6, column 8: did not",
    ):
        render(tmp_path)


def test_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    write(tmp_path, {"m.yaml": CM.format(name="c") + "base: &b {x: 1}\ndata:\n  <<: *b\n  y: '2'\n"})
    assert render(tmp_path)[0].manifest["data"] == {"x": 1, "y": "2"}


# --- duplicates --------------------------------------------------------------------------------------


def test_duplicate_objects_name_both_origins(tmp_path: Path) -> None:
    write(tmp_path, {"a.yaml": CM.format(name="same"), "b/c.yaml": "---\n" + CM.format(name="same")})
    with pytest.raises(
        RenderError,
        match=r"^b/c\.yaml#1, ConfigMap/same: duplicate object ConfigMap/same: "
        r"also defined in a\.yaml#1$",
    ):
        render(tmp_path)


def test_same_name_in_other_kind_group_or_namespace_is_not_a_duplicate(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "a.yaml": CM.format(name="x"),
            "b.yaml": CM.format(name="x") + "  namespace: default\n",  # the planner re-checks after defaulting
            "c.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n",
            "d.yaml": "apiVersion: example.com/v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        },
    )
    assert len(render(tmp_path)) == 4


def test_versions_do_not_make_objects_distinct(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "a.yaml": "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n",
            "b.yaml": "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n",
        },
    )
    with pytest.raises(RenderError, match=r"duplicate object HorizontalPodAutoscaler\.autoscaling/h"):
        render(tmp_path)


# --- limits ------------------------------------------------------------------------------------------


def test_oversize_file_is_rejected_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:  # sparse: 10 MiB + 1 byte without writing them
        handle.truncate(10 * 1024 * 1024 + 1)

    def no_open(*args: object, **kwargs: object) -> None:
        raise AssertionError("opened a file over the limit")

    monkeypatch.setattr(Path, "open", no_open)
    with pytest.raises(RenderError, match=r"^big\.yaml: file is larger than the 10485760-byte limit"):
        render(tmp_path)


def test_file_at_the_limit_is_read(tmp_path: Path) -> None:
    text = CM.format(name="c")
    write(tmp_path, {"c.yaml": text})
    assert len(render(tmp_path, RenderOptions(max_file_bytes=len(text)))) == 1
    with pytest.raises(RenderError, match="larger than the"):
        render(tmp_path, RenderOptions(max_file_bytes=len(text) - 1))


def test_alias_bomb_fails_fast_and_small(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "billion-laughs.yaml", tmp_path)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(RenderError, match=r"billion-laughs\.yaml: document 1 expands to more than 1000000"):
            render(tmp_path)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 0.5
    assert peak < 20 * 1024 * 1024


def test_aliases_within_the_bound_are_fine(tmp_path: Path) -> None:
    text = CM.format(name="c") + "data:\n  a: &a x\n  b: *a\n"
    write(tmp_path, {"c.yaml": text})
    assert render(tmp_path)[0].manifest["data"] == {"a": "x", "b": "x"}
    # 1 root + 4 keys + apiVersion/kind/metadata values + metadata's key/value + data's 2 keys + 2 values = 15
    with pytest.raises(RenderError, match="more than 14 YAML nodes"):
        render(tmp_path, RenderOptions(max_yaml_nodes=14))
    assert len(render(tmp_path, RenderOptions(max_yaml_nodes=15))) == 1


# --- symlinks ----------------------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    return write(tmp_path / "outside", {"cm.yaml": CM.format(name="stolen")})


def test_file_symlink_outside_the_repository_is_named(tmp_path: Path, outside: Path) -> None:
    repo = write(tmp_path / "repo", {"ok.yaml": CM.format(name="ok")})
    (repo / "link.yaml").symlink_to(outside / "cm.yaml")
    with pytest.raises(RenderError, match=r"^link\.yaml: symlink leads outside the repository"):
        render(repo)


def test_dir_symlink_outside_the_repository_is_named(tmp_path: Path, outside: Path) -> None:
    repo = write(tmp_path / "repo", {"sub/ok.yaml": CM.format(name="ok")})
    (repo / "sub" / "more").symlink_to(outside)
    with pytest.raises(RenderError, match=r"^sub/more: symlink leads outside the repository"):
        render(repo)


def test_relative_symlink_escape_is_caught(tmp_path: Path, outside: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "x.yaml").symlink_to("../outside/cm.yaml")
    with pytest.raises(RenderError, match="symlink leads outside"):
        render(repo)


def test_symlink_inside_the_repository_is_followed(tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {"shared/cm.yaml": CM.format(name="shared")})
    (repo / "app").mkdir()
    (repo / "app" / "cm.yaml").symlink_to("../shared/cm.yaml")
    (repo / "shared" / "readme.txt").symlink_to("/etc/hostname")  # never read: not a manifest
    with pytest.raises(RenderError, match="duplicate object ConfigMap/shared"):
        render(repo)  # followed: the same object twice


def test_repo_root_widens_the_boundary_to_the_repository(tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {"common/cm.yaml": CM.format(name="common")})
    (repo / "env").mkdir()
    (repo / "env" / "cm.yaml").symlink_to("../common/cm.yaml")
    with pytest.raises(RenderError, match="outside the repository"):
        render(repo / "env")
    assert [o.key.name for o in render(repo / "env", RenderOptions(repo_root=repo))] == ["common"]


def test_broken_symlink_is_named(tmp_path: Path) -> None:
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "missing.yaml")
    with pytest.raises(RenderError, match=r"^gone\.yaml: broken symlink"):
        render(tmp_path)


def test_symlink_loop_is_an_error_not_a_hang(tmp_path: Path) -> None:
    write(tmp_path, {"a/cm.yaml": CM.format(name="c")})
    (tmp_path / "a" / "again").symlink_to("..")
    with pytest.raises(RenderError, match=r"^a/again: symlink loop"):
        render(tmp_path)


# --- kustomize / helm with stand-in binaries (the real tools: tests/integration/test_render_tools.py) --


def fake_tool(path: Path, script: str) -> Path:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def echo_tool(path: Path, object_name: str) -> Path:
    """A stand-in for kubectl/helm that prints one ConfigMap whose data.args records its command line."""
    fmt = f"apiVersion: v1\\nkind: ConfigMap\\nmetadata:\\n  name: {object_name}\\ndata:\\n  args: '%s'\\n"
    return fake_tool(path, f'printf "{fmt}" "$*"\n')


def test_kustomization_dir_is_rendered_by_kubectl_and_not_walked(tmp_path: Path) -> None:
    kubectl = echo_tool(tmp_path / "kubectl", "from-kustomize")
    repo = write(
        tmp_path / "repo",
        {
            "a.yaml": CM.format(name="a"),
            "overlay/kustomization.yaml": "resources: [base]\n",
            "overlay/base/cm.yaml": CM.format(name="a"),  # would be a duplicate if walked
            "z.yaml": CM.format(name="z"),
        },
    )
    objs = render(repo, RenderOptions(kubectl=str(kubectl)))
    assert summary(objs) == [
        ("ConfigMap", "a", "a.yaml#1"),
        ("ConfigMap", "from-kustomize", "overlay (kustomize)"),
        ("ConfigMap", "z", "z.yaml#1"),
    ]
    assert objs[1].manifest["data"]["args"] == f"kustomize {repo / 'overlay'}"


@pytest.mark.parametrize("name", ["kustomization.yml", "Kustomization"])
def test_other_kustomization_file_names(tmp_path: Path, name: str) -> None:
    kubectl = fake_tool(tmp_path / "kubectl", "echo 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: k}'\n")
    repo = write(tmp_path / "repo", {name: "resources: []\n"})
    assert summary(render(repo, RenderOptions(kubectl=str(kubectl)))) == [("ConfigMap", "k", ". (kustomize)")]


def test_a_kustomization_rendered_as_the_path_is_named_by_its_path_not_dot(tmp_path: Path) -> None:
    # `--path apps/web` of a repository whose apps/web is a kustomization: origins (and the sources and
    # errors built from them) said `. (kustomize)`, which names nothing the user can find.
    kubectl = echo_tool(tmp_path / "kubectl", "web")
    repo = write(tmp_path / "repo", {"apps/web/kustomization.yaml": "resources: []\n"})
    objs = render(repo / "apps" / "web", RenderOptions(kubectl=str(kubectl), repo_root=repo))
    assert summary(objs) == [("ConfigMap", "web", "apps/web (kustomize)")]
    failing = fake_tool(tmp_path / "failing", "echo 'no such base' >&2; exit 1\n")
    with pytest.raises(RenderError, match=r"^apps/web \(kustomize\): `.*` failed \(exit 1\)"):
        render(repo / "apps" / "web", RenderOptions(kubectl=str(failing), repo_root=repo))


def test_chart_dir_is_rendered_by_helm_template(tmp_path: Path) -> None:
    helm = echo_tool(tmp_path / "helm", "from-helm")
    repo = write(
        tmp_path / "repo",
        {
            "charts/web/Chart.yaml": "apiVersion: v2\nname: web\nversion: 0.1.0\n",
            "charts/web/values.yaml": "x: 1\n",
            "charts/web/prod.yaml": "replicas: 3\n",
        },  # in the chart's directory: not walked as manifests
    )
    opts = RenderOptions(helm=str(helm), namespace="demo", helm_values=(Path("charts/web/prod.yaml"),))
    [obj] = render(repo, opts)
    assert obj.origin == "charts/web (helm)"
    assert obj.manifest["data"]["args"] == (
        f"template web {repo / 'charts/web'} --namespace demo --include-crds --skip-tests "
        f"--values {repo / 'charts/web/prod.yaml'}"
    )
    opts = RenderOptions(helm=str(helm), helm_release="rel")
    assert render(repo, opts)[0].manifest["data"]["args"].startswith("template rel ")


def test_missing_values_file_is_named(tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n"})
    with pytest.raises(RenderError, match=r"c \(helm\): values file nope\.yaml does not exist"):
        render(repo, RenderOptions(helm_values=(Path("nope.yaml"),)))


def test_tool_failure_names_the_directory_and_stderr_tail(tmp_path: Path) -> None:
    kubectl = fake_tool(
        tmp_path / "kubectl",
        "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo noise $i >&2; done\n"
        "echo 'Error: accumulating resources: missing.yaml' >&2; exit 1\n",
    )
    repo = write(tmp_path / "repo", {"app/kustomization.yaml": "resources: [missing.yaml]\n"})
    with pytest.raises(RenderError, match=r"^app \(kustomize\): `.*kubectl kustomize` failed \(exit 1\)") as err:
        render(repo, RenderOptions(kubectl=str(kubectl)))
    assert "accumulating resources: missing.yaml" in str(err.value)
    assert "noise 12" in str(err.value) and "noise 1\n" not in str(err.value)


def test_missing_binary_says_which_and_how_to_get_it(tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {"k/kustomization.yaml": "resources: []\n"})
    with pytest.raises(RenderError, match=r"`/nonexistent/kubectl` not found, needed for k \(kustomize\): install"):
        render(repo, RenderOptions(kubectl="/nonexistent/kubectl"))
    repo = write(tmp_path / "repo2", {"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n"})
    with pytest.raises(RenderError, match=r"`no-such-helm-binary` not found, needed for c \(helm\): install Helm"):
        render(repo, RenderOptions(helm="no-such-helm-binary"))


def test_tool_output_is_validated_and_bounded(tmp_path: Path) -> None:
    kubectl = fake_tool(tmp_path / "kubectl", "printf 'apiVersion: v1\\nkind: ConfigMap\\n---\\nkind: X\\n'\n")
    repo = write(tmp_path / "repo", {"k/kustomization.yaml": "resources: []\n"})
    with pytest.raises(RenderError, match=r"^k \(kustomize\)#1, ConfigMap: missing metadata\.name"):
        render(repo, RenderOptions(kubectl=str(kubectl)))


@pytest.mark.parametrize(
    ("kustomization", "link"), [("k/kustomization.yaml", "k/secret.txt"), ("kustomization.yaml", "secret.txt")]
)
def test_symlink_out_of_a_kustomization_is_rejected_before_running_the_tool(
    tmp_path: Path, outside: Path, kustomization: str, link: str
) -> None:
    marker = tmp_path / "ran"
    kubectl = fake_tool(tmp_path / "kubectl", f"touch {marker}\n")
    repo = write(tmp_path / "repo", {kustomization: "resources: [secret.txt]\n"})
    (repo / link).symlink_to(outside / "cm.yaml")
    with pytest.raises(RenderError, match=rf"^{re.escape(link)}: symlink leads outside"):
        render(repo, RenderOptions(kubectl=str(kubectl)))
    assert not marker.exists()


# --- to_yaml -----------------------------------------------------------------------------------------


def test_to_yaml_round_trips_in_key_order() -> None:
    objs = [o.manifest for o in render(FIXTURES / "tree")]
    text = to_yaml(objs)
    assert text.startswith("---\napiVersion: v1\nkind: Namespace\n")
    assert [d for d in yaml.safe_load_all(text)] == objs
    assert list(yaml.safe_load_all(text))[5]["metadata"] == {"name": "web", "namespace": "shop"}


def test_to_yaml_never_emits_aliases_and_quotes_ambiguous_strings() -> None:
    shared = {"a": "b"}
    text = to_yaml([{"kind": "X", "x": shared, "y": shared, "v": "1.10", "on": "yes", "long": "w " * 100}])
    assert "&" not in text and "*" not in text
    assert yaml.safe_load(text) == {"kind": "X", "x": shared, "y": shared, "v": "1.10", "on": "yes", "long": "w " * 100}
    assert to_yaml([]) == ""


def test_origins_use_forward_slashes() -> None:
    assert all("\\" not in o.origin and not o.origin.startswith(os.sep) for o in render(FIXTURES / "tree"))
