"""Render crash safety and bounds, and empty files / --helm-values.

Every bad input must become a RenderError naming file, document and object, and no message may contain
a Secret's value, whatever PyYAML's constructor would have said about it.
"""

from __future__ import annotations

import json
import re
import stat
import time
from pathlib import Path

import pytest

from gitops_sync.errors import MAX_RENDER_MESSAGE, RenderError
from gitops_sync.render import RenderOptions, _kustomize, _tools, render
from gitops_sync.render._yaml import NodeBudget, load_json, load_yaml

SECRET = "hunter2-Sup3rSecret"
SECRET_HEAD = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n"


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def render_error(root: Path, options: RenderOptions | None = None) -> RenderError:
    with pytest.raises(RenderError) as err:
        render(root, options)
    return err.value


# --- crash safety: bad types and tags -----------------------------------------------------------------

BAD_SECRETS = [
    # (YAML after the Secret's head, the message expected)
    (
        f"stringData:\n  password: !!int {SECRET}\n",
        r"^s\.yaml:6:13, Secret/db: invalid YAML: the value cannot be read as !!int$",
    ),
    (f"stringData:\n  password: !!float {SECRET}\n", r"^s\.yaml:6:13, Secret/db: .* cannot be read as !!float$"),
    (f"stringData:\n  password: !!bool {SECRET}\n", r"^s\.yaml:6:13, Secret/db: .* cannot be read as !!bool$"),
    (f"data:\n  password: !!int 0x{SECRET}\n", r"cannot be read as !!int$"),
    (f"data:\n  password: !!timestamp {SECRET}\n", None),  # a timestamp stays text: no error
    (f"stringData: {SECRET}\n", r"^s\.yaml#1, Secret/db: stringData must be a mapping of strings \(found a string\)$"),
    (f"data: [{SECRET}]\n", r"^s\.yaml#1, Secret/db: data must be a mapping of strings \(found a list\)$"),
    (f"data:\n  password: [{SECRET}]\n", r"^s\.yaml#1, Secret/db: data\.password must be a string \(found a list\)$"),
    ("data:\n  password: 12345678901234\n", r"data\.password must be a string \(found a number\)$"),
    (f"stringData:\n  a: {{x: {SECRET}}}\n", r"stringData\.a must be a string \(found a mapping\)$"),
    (
        "stringData:\n  a: 1\n  b: 2\n  c: 3\n  d: 4\n  e: 5\n",
        r"stringData\.c must be a string .*; and 2 more in stringData$",
    ),
]


@pytest.mark.parametrize(("body", "message"), BAD_SECRETS)
def test_bad_secret_values_never_reach_the_message(tmp_path: Path, body: str, message: str | None) -> None:
    write(tmp_path, {"s.yaml": SECRET_HEAD + body})
    if message is None:
        [obj] = render(tmp_path)
        assert obj.manifest["data"]["password"] == SECRET
        return
    err = render_error(tmp_path)
    assert SECRET not in str(err)
    assert err.__cause__ is None  # raised `from None`: no chained exception quoting the value either
    assert re.search(message, str(err)), str(err)


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        (
            "metadata: {name: c, labels: [a]}",
            r"^c\.yaml#1, ConfigMap/c: metadata\.labels must be a mapping of strings \(found a list\)$",
        ),
        (
            'metadata: {name: c, annotations: "x"}',
            r"metadata\.annotations must be a mapping of strings \(found a string\)$",
        ),
        ("metadata: {name: c, labels: {a: 1}}", r"metadata\.labels\.a must be a string \(found a number\)$"),
        ("metadata: {name: c, labels: {a: true}}", r"metadata\.labels\.a must be a string \(found a boolean\)$"),
        (
            "metadata: {name: c, annotations: {a: {b: c}}}",
            r"metadata\.annotations\.a must be a string \(found a mapping\)$",
        ),
        ("metadata: x", r"^c\.yaml#1, ConfigMap: metadata must be a mapping \(found a string\)$"),
        ("metadata: {name: [x]}", r"metadata\.name must be a string$"),
        ("metadata: {name: c, namespace: {a: b}}", r"metadata\.namespace must be a string \(found a mapping\)$"),
    ],
)
def test_metadata_types_are_validated_at_render(tmp_path: Path, meta: str, message: str) -> None:
    write(tmp_path, {"c.yaml": f"apiVersion: v1\nkind: ConfigMap\n{meta}\n"})
    assert re.search(message, str(render_error(tmp_path)))


def test_null_labels_and_values_are_accepted_as_the_api_server_reads_them(tmp_path: Path) -> None:
    write(
        tmp_path,
        {"c.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: c, labels: {a: ~}, annotations: ~}\ndata: {a: ~}\n"},
    )
    assert len(render(tmp_path)) == 1


def test_constructor_errors_name_the_document_in_a_multi_document_file(tmp_path: Path) -> None:
    ok = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"
    write(tmp_path, {"m.yaml": ok + "---\n" + SECRET_HEAD + f"data: {{p: !!float {SECRET}}}\n"})
    err = render_error(tmp_path)
    assert str(err).startswith("m.yaml:9:11, Secret/db: invalid YAML")
    assert SECRET not in str(err)


def test_a_huge_number_is_an_error_not_a_crash(tmp_path: Path) -> None:
    write(tmp_path, {"c.yaml": SECRET_HEAD + "data:\n  n: " + "9" * 5000 + "\n"})
    assert "cannot be read as !!int" in str(render_error(tmp_path))


@pytest.mark.parametrize("depth", [101, 990])
def test_deep_nesting_is_refused_before_anything_recurses(tmp_path: Path, depth: int) -> None:
    write(
        tmp_path,
        {"d.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\ndata: " + "[" * depth + "]" * depth + "\n"},
    )
    err = render_error(tmp_path)
    assert "is nested more than 100 levels deep" in str(err)
    assert str(err).startswith("d.yaml:4:")


def test_nesting_up_to_the_limit_renders(tmp_path: Path) -> None:
    write(tmp_path, {"d.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\nx: " + "[" * 98 + "]" * 98})
    assert len(render(tmp_path)) == 1


def test_deep_json_is_refused(tmp_path: Path) -> None:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j"}, "x": "v"}
    for _ in range(150):
        doc = {"apiVersion": "v1", "kind": "List", "items": [doc]}
    write(tmp_path, {"d.json": json.dumps(doc)})
    assert "nested more than 100 levels deep" in str(render_error(tmp_path))


def test_deeply_nested_lists_of_lists_are_bounded(tmp_path: Path) -> None:
    """kind: List inside kind: List recurses in the walker: the depth bound covers it too."""
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
    for _ in range(200):
        text = "apiVersion: v1\nkind: List\nitems:\n- " + text.replace("\n", "\n  ").rstrip() + "\n"
    write(tmp_path, {"l.yaml": text})
    assert "nested more than 100 levels deep" in str(render_error(tmp_path))


def test_a_symlink_loop_between_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    assert "symlink" in str(render_error(tmp_path))


def test_unexpected_errors_name_the_file_and_never_the_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitops_sync.render import _render

    write(tmp_path, {"x/c.yaml": SECRET_HEAD + f"stringData: {{p: {SECRET}}}\n"})

    def boom(value: object, where: str) -> object:
        raise ValueError(f"invalid {SECRET}")

    monkeypatch.setattr(_render, "_validate", boom)
    err = render_error(tmp_path)
    assert str(err) == "x/c.yaml: cannot render (ValueError)"


# --- bounds: node budget per file and per render ------------------------------------------------------

BOMB_DOC = """apiVersion: v1
kind: ConfigMap
metadata: {{name: c{i}}}
x:
  a: &a{i} [x, x, x, x, x, x, x, x, x, x]
  b: &b{i} [*a{i}, *a{i}, *a{i}, *a{i}, *a{i}, *a{i}, *a{i}, *a{i}, *a{i}, *a{i}]
  c: &c{i} [*b{i}, *b{i}, *b{i}, *b{i}, *b{i}, *b{i}, *b{i}, *b{i}, *b{i}, *b{i}]
  d: [*c{i}, *c{i}, *c{i}, *c{i}, *c{i}, *c{i}, *c{i}, *c{i}, *c{i}, *c{i}]
"""  # 11,124 nodes once the aliases are expanded: four fit in 50,000, five do not


def test_budget_holds_per_file_not_per_document(tmp_path: Path) -> None:
    write(tmp_path, {"many.yaml": "---\n".join(BOMB_DOC.format(i=i) for i in range(10))})
    assert len(render(tmp_path, RenderOptions(max_yaml_nodes=200_000))) == 10
    err = render_error(tmp_path, RenderOptions(max_yaml_nodes=50_000))
    assert str(err) == (
        "many.yaml: document 5 expands to more than 50000 YAML nodes in this file (aliases expanded); "
        "refusing to load it"
    )


def test_budget_holds_per_render_over_all_files(tmp_path: Path) -> None:
    write(tmp_path, {f"f{i:02}.yaml": BOMB_DOC.format(i=i) for i in range(10)})
    assert len(render(tmp_path, RenderOptions(max_yaml_nodes=20_000, max_render_nodes=200_000))) == 10
    err = render_error(tmp_path, RenderOptions(max_yaml_nodes=20_000, max_render_nodes=50_000))
    assert str(err) == (
        "f04.yaml: document 1 brings the render past 50000 YAML nodes over all files (aliases expanded); "
        "refusing to load it"
    )


def test_plain_files_count_against_the_render_budget(tmp_path: Path) -> None:
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\ndata:\n  a: x\n  b: y\n"  # 15 nodes
    write(tmp_path, {f"c{i}.yaml": cm.format(i=i) for i in range(10)})
    assert len(render(tmp_path, RenderOptions(max_render_nodes=150))) == 10
    assert "brings the render past 149 YAML nodes" in str(render_error(tmp_path, RenderOptions(max_render_nodes=149)))


def test_json_files_count_against_the_budget(tmp_path: Path) -> None:
    items = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"j{i}"}} for i in range(3)]
    write(tmp_path, {"j.json": json.dumps(items)})
    assert len(render(tmp_path, RenderOptions(max_yaml_nodes=27))) == 3  # 9 nodes each
    assert "document 3 expands to more than 26 YAML nodes in this file" in str(
        render_error(tmp_path, RenderOptions(max_yaml_nodes=26))
    )


def test_two_hundred_alias_documents_fail_fast(tmp_path: Path) -> None:
    """200 documents each just under the old per-document bound took 50 s and 2.2 GB."""
    big = BOMB_DOC.replace("  d: [", "  e: &e{i} [").replace("*c{i}]\n", "*c{i}]\n  f: [*e{i}, *e{i}, *e{i}]\n")
    write(tmp_path, {f"f{i:03}.yaml": big.format(i=i) for i in range(200)})
    started = time.perf_counter()
    err = render_error(tmp_path, RenderOptions(max_render_nodes=1_000_000))
    assert "brings the render past 1000000 YAML nodes" in str(err)
    assert time.perf_counter() - started < 5


def test_load_yaml_charges_the_shared_budget() -> None:
    budget = NodeBudget(per_file=100, per_render=1000)
    load_yaml("a: b\n", "x.yaml", budget)
    load_yaml("a: &x b\nc: *x\n", "y.yaml", budget)
    assert budget.used == 3 + 5


# --- zero-byte and comment-only files ------------------------------------------------------------------


def test_zero_byte_whitespace_and_comment_only_files_are_skipped(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "report.json": b"",
            "blank.json": " \n\t\n",
            "empty.yaml": b"",
            "blank.yml": "\n\n   \n",
            "comments.yaml": "# only a comment\n# and another\n",
            "bom.yaml": b"\xef\xbb\xbf",
            "separators.yaml": "---\n# nothing\n---\n",
            "cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
        },
    )
    assert [o.key.name for o in render(tmp_path)] == ["c"]


def test_load_json_of_nothing_is_no_document() -> None:
    assert load_json(b"", "r.json") == []
    assert load_json(b"  \n", "r.json") == []


def test_invalid_json_still_fails(tmp_path: Path) -> None:
    write(tmp_path, {"r.json": "{"})
    assert str(render_error(tmp_path)).startswith("r.json:1:2: invalid JSON")


# --- --helm-values: the user's file from the current directory, else from the repository ---------------


def fake_tool(path: Path, script: str) -> Path:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def args_helm(tmp_path: Path) -> Path:
    fmt = "apiVersion: v1\\nkind: ConfigMap\\nmetadata:\\n  name: h\\ndata:\\n  args: '%s'\\n"
    return fake_tool(tmp_path / "helm", f'printf "{fmt}" "$*"\n')


@pytest.fixture
def chart_repo(tmp_path: Path) -> Path:
    # Values inside the chart's directory: a chart is rendered whole, its files are not walked as manifests.
    return write(
        tmp_path / "repo", {"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n", "c/env/prod.yaml": "x: repo\n"}
    )


def test_helm_values_relative_to_the_current_directory_come_first(
    tmp_path: Path, chart_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = write(tmp_path / "work", {"c/env/prod.yaml": "x: mine\n"})
    monkeypatch.chdir(here)
    [obj] = render(chart_repo, RenderOptions(helm=str(args_helm(tmp_path)), helm_values=(Path("c/env/prod.yaml"),)))
    assert obj.manifest["data"]["args"].endswith(f"--values {here / 'c/env/prod.yaml'}")


def test_helm_values_fall_back_to_the_repository(
    tmp_path: Path, chart_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    [obj] = render(chart_repo, RenderOptions(helm=str(args_helm(tmp_path)), helm_values=(Path("c/env/prod.yaml"),)))
    assert obj.manifest["data"]["args"].endswith(f"--values {chart_repo / 'c/env/prod.yaml'}")


def test_helm_values_outside_the_repository_are_the_users_choice(tmp_path: Path, chart_repo: Path) -> None:
    outside = write(tmp_path / "elsewhere", {"v.yaml": "x: 1\n"}) / "v.yaml"
    [obj] = render(chart_repo, RenderOptions(helm=str(args_helm(tmp_path)), helm_values=(outside,)))
    assert obj.manifest["data"]["args"].endswith(f"--values {outside}")


def test_helm_values_found_in_the_repository_may_not_lead_out_of_it(
    tmp_path: Path, chart_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"host-secret.yaml": "token: x\n"})
    (chart_repo / "link.yaml").symlink_to(tmp_path / "host-secret.yaml")
    err = render_error(chart_repo, RenderOptions(helm=str(args_helm(tmp_path)), helm_values=(Path("link.yaml"),)))
    assert "values file link.yaml leads outside the repository" in str(err)


def test_missing_helm_values_name_both_places(
    tmp_path: Path, chart_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    err = render_error(chart_repo, RenderOptions(helm_values=(Path("nope.yaml"),)))
    assert f"values file nope.yaml does not exist (looked in the current directory {tmp_path}" in str(err)
    assert f"and in the repository {chart_repo}" in str(err)


BOMB = "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))
BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + BOMB  # 10**9 nodes expanded, 420 bytes


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ({"c/Chart.yaml": BOMB}, "c/Chart.yaml: document 1 expands to more than 100000 YAML nodes"),
        ({"c/values.yaml": BOMB}, "c/values.yaml: document 1 expands to more than 1000000 YAML nodes"),
        (
            {"c/values.yaml": "x: " + "[" * 150 + "]" * 150 + "\n"},
            "c/values.yaml:1:53: invalid YAML: document 1 is nested",
        ),
        ({"c/Chart.lock": "[" * 5000 + "]" * 5000}, "c/Chart.lock:1:1001: invalid YAML: while increasing flow level"),
        ({"c/Chart.yaml": "x: y\n" * 300_000}, "c/Chart.yaml: file is larger than the 1048576-byte limit"),
        (
            {"c/charts/sub/Chart.yaml": "name: sub\n", "c/charts/sub/values.yaml": BOMB},
            "c/charts/sub/values.yaml: document 1 expands to more than 1000000 YAML nodes",
        ),
    ],
)
def test_a_charts_yaml_files_are_bounded_before_helm_reads_them(
    tmp_path: Path, files: dict[str, str], says: str
) -> None:
    """helm parses Chart.yaml and values.yaml itself; they get the bounds of our own files first, so the
    error names the file (the fake helm here would render happily: it never runs)."""
    repo = write(tmp_path / "repo", {"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n", **files})
    started = time.perf_counter()
    err = render_error(repo, RenderOptions(helm=str(args_helm(tmp_path))))
    assert time.perf_counter() - started < 2
    assert str(err).startswith(says), err


def test_a_helm_values_file_is_bounded_too(tmp_path: Path, chart_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(chart_repo, {"c/env/bomb.yaml": BOMB})
    err = render_error(chart_repo, RenderOptions(helm=str(args_helm(tmp_path)), helm_values=(Path("c/env/bomb.yaml"),)))
    assert str(err).startswith("c/env/bomb.yaml: document 1 expands to more than 1000000 YAML nodes"), err


def test_a_kustomization_entry_of_a_megabyte_makes_a_bounded_message(tmp_path: Path) -> None:
    """The message quotes the entry it refuses; the entry is as long as the file allows (1 MB)."""
    repo = kustomize_repo(tmp_path, "resources:\n- https://example.test/" + "x" * 1_000_000 + "\n")
    err = str(render_error(repo, RenderOptions(kubectl="/nonexistent/kubectl")))
    assert err.startswith("k/kustomization.yaml: resources entry 'https://example.test/xxx") and err.endswith("…")
    assert len(err) <= len("k/kustomization.yaml: ") + MAX_RENDER_MESSAGE


# --- tools: time and output bounds, redacted stderr ---------------------------------------------------


def kustomize_repo(tmp_path: Path, kustomization: str = "resources: []\n", **files: str) -> Path:
    return write(tmp_path / "repo", {"k/kustomization.yaml": kustomization, **{f"k/{n}": t for n, t in files.items()}})


def test_tool_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    """A grandchild holding stdout open used to keep communicate() waiting after the timeout."""
    pid_file = tmp_path / "grandchild.pid"
    kubectl = fake_tool(tmp_path / "kubectl", f"sleep 60 &\necho $! > {pid_file}\nwait\n")
    started = time.perf_counter()
    err = render_error(kustomize_repo(tmp_path), RenderOptions(kubectl=str(kubectl), tool_timeout=1))
    assert time.perf_counter() - started < 5
    assert str(err) == f"k (kustomize): `{kubectl} kustomize` did not finish within 1s (stopped)"
    grandchild = Path(f"/proc/{int(pid_file.read_text())}/status")
    time.sleep(0.2)
    # Gone, or a zombie waiting for a reaper: either way no longer running.
    assert not grandchild.exists() or "\nState:\tZ" in grandchild.read_text()


def test_tool_output_is_capped(tmp_path: Path) -> None:
    kubectl = fake_tool(tmp_path / "kubectl", "yes 'a: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb'\n")
    started = time.perf_counter()
    err = render_error(kustomize_repo(tmp_path), RenderOptions(kubectl=str(kubectl), max_tool_output_bytes=1_000_000))
    assert str(err) == f"k (kustomize): `{kubectl} kustomize` printed more than the 1000000-byte output limit (stopped)"
    assert time.perf_counter() - started < 5


def test_tool_output_counts_against_the_render_budget(tmp_path: Path) -> None:
    docs = "".join(f"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\n" for i in range(20))
    (tmp_path / "out.yaml").write_text(docs)
    kubectl = fake_tool(tmp_path / "kubectl", f"cat {tmp_path / 'out.yaml'}\n")
    repo = kustomize_repo(tmp_path)
    assert (
        len(render(repo, RenderOptions(kubectl=str(kubectl), max_yaml_nodes=10))) == 20
    )  # not a file: no per-file bound
    err = render_error(repo, RenderOptions(kubectl=str(kubectl), max_render_nodes=100))
    assert "k (kustomize): document 12 brings the render past 100 YAML nodes" in str(err)


def test_secret_generator_literals_are_redacted_from_tool_errors(tmp_path: Path) -> None:
    kubectl = fake_tool(
        tmp_path / "kubectl",
        f"echo 'error: loading KV pairs: literal sources [{SECRET}]: "
        f"invalid literal source {SECRET}, expected key=value' >&2\n"
        f"echo 'env file line: TOKEN=from-env-{SECRET}' >&2\n"
        f"echo 'file content: filed-{SECRET}' >&2\nexit 1\n",
    )
    repo = kustomize_repo(
        tmp_path,
        f"secretGenerator:\n- name: s\n  literals: ['{SECRET}']\n  envs: [s.env]\n  files: [key=s.txt]\n",
        **{"s.env": f"TOKEN=from-env-{SECRET}\n", "s.txt": f"filed-{SECRET}\n"},
    )
    err = str(render_error(repo, RenderOptions(kubectl=str(kubectl))))
    assert SECRET not in err
    assert "invalid literal source ***, expected key=***" in err
    assert "env file line: ***" in err and "file content: ***" in err


def test_redact_masks_values_quoted_and_short_ones_only_where_they_stand_alone() -> None:
    text = 'invalid "pa\\"ss" in x=y; a literal k=v; value ab in abc'
    assert _tools.redact(text, {'pa"ss', "ab"}) == 'invalid "***" in x=***; a literal k=***; value *** in abc'


# --- kustomize: remote bases and paths outside the repository -----------------------------------------


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ("https://github.com/org/repo//deploy?ref=v1", "resources"),
        ("github.com/org/repo/deploy?ref=v1", "resources"),
        ("git::https://example.com/org/repo.git", "resources"),
        ("git@github.com:org/repo.git", "resources"),
        ("ssh://git@example.com/org/repo.git", "bases"),
        ("file:///etc/kubernetes", "resources"),
        ("https://example.com/component", "components"),
        ("example.com/org/repo", "resources"),
    ],
)
def test_remote_references_are_refused(tmp_path: Path, entry: str, key: str) -> None:
    repo = kustomize_repo(tmp_path, f"{key}:\n- {entry}\n")
    err = render_error(repo, RenderOptions(kubectl="/nonexistent/kubectl"))
    assert str(err) == (
        f"k/kustomization.yaml: {key} entry {entry!r} is a remote reference: kustomize would fetch it from the "
        "network; only paths inside the repository are allowed (pass --kustomize-allow-external to allow it)"
    )


@pytest.mark.parametrize(
    ("kustomization", "key"),
    [
        ("resources:\n- ../../outside\n", "resources"),
        ("resources:\n- {outside}\n", "resources"),
        ("components:\n- ../../outside\n", "components"),
        ("patches:\n- path: ../../outside/patch.yaml\n", "patches.path"),
        ("patchesStrategicMerge:\n- ../../outside/patch.yaml\n", "patchesStrategicMerge"),
        ("patchesJson6902:\n- path: ../../outside/patch.yaml\n  target: {kind: X, name: y}\n", "patchesJson6902.path"),
        ("configMapGenerator:\n- name: c\n  files: [k=../../outside/patch.yaml]\n", "configMapGenerator.files"),
        ("secretGenerator:\n- name: c\n  envs: [../../outside/patch.yaml]\n", "secretGenerator.envs"),
        ("crds:\n- ../../outside/patch.yaml\n", "crds"),
    ],
)
def test_paths_outside_the_repository_are_refused(tmp_path: Path, kustomization: str, key: str) -> None:
    outside = write(tmp_path / "outside", {"kustomization.yaml": "resources: []\n", "patch.yaml": "a: b\n"})
    repo = kustomize_repo(tmp_path, kustomization.replace("{outside}", str(outside)))
    err = str(render_error(repo, RenderOptions(kubectl="/nonexistent/kubectl")))
    assert err.startswith(f"k/kustomization.yaml: {key} entry ")
    assert f"leads outside the repository (to {outside}" in err
    assert err.endswith("pass --kustomize-allow-external to allow it")


def test_bases_and_components_are_walked_recursively(tmp_path: Path) -> None:
    repo = write(
        tmp_path / "repo",
        {
            "overlays/prod/kustomization.yaml": "resources: [../../bases/app]\ncomponents: [../../components/x]\n",
            "bases/app/kustomization.yaml": "resources: [deploy.yaml, ../common]\n",
            "bases/app/deploy.yaml": "a: b\n",
            "bases/common/Kustomization": "resources:\n- https://example.com/remote.yaml\n",
            "components/x/kustomization.yml": "kind: Component\n",
        },
    )
    err = render_error(repo / "overlays", RenderOptions(kubectl="/nonexistent/kubectl", repo_root=repo))
    assert str(err).startswith("bases/common/Kustomization: resources entry 'https://example.com/remote.yaml'")


def test_a_symlinked_base_leading_out_is_refused(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside", {"kustomization.yaml": "resources: []\n"})
    repo = kustomize_repo(tmp_path, "resources: [../base]\n")  # not below k/, so no tree-link check sees it
    (repo / "base").symlink_to(outside)
    err = render_error(repo / "k", RenderOptions(kubectl="/nonexistent/kubectl", repo_root=repo))
    assert str(err).startswith("k/kustomization.yaml: resources entry '../base' leads outside the repository")


def test_inline_patches_and_in_repo_paths_pass(tmp_path: Path) -> None:
    repo = write(
        tmp_path / "repo",
        {
            "k/kustomization.yaml": (
                "resources: [cm.yaml, ../shared]\n"
                "patchesStrategicMerge:\n- |-\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: x}\n"
                'patches:\n- patch: \'[{"op": "add"}]\'\n  target: {kind: ConfigMap}\n'
            ),
            "k/cm.yaml": "a: b\n",
            "shared/kustomization.yaml": "resources: []\n",
        },
    )
    assert _kustomize.check(repo / "k", repo.resolve()) == frozenset()


def test_allow_external_lets_them_through_to_kustomize(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside", {"kustomization.yaml": "resources: []\n"})
    kubectl = fake_tool(tmp_path / "kubectl", "echo 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: k}'\n")
    repo = kustomize_repo(tmp_path, f"resources:\n- {outside}\n- https://example.com/x.yaml\n")
    objs = render(repo, RenderOptions(kubectl=str(kubectl), kustomize_allow_external=True))
    assert [o.key.name for o in objs] == ["k"]


def test_a_broken_kustomization_file_is_named(tmp_path: Path) -> None:
    repo = kustomize_repo(tmp_path, "resources: [\n")
    assert str(render_error(repo, RenderOptions(kubectl="/nonexistent/kubectl"))).startswith(
        "k/kustomization.yaml:2:1: invalid YAML"
    )
