"""What the CLI prints when things go wrong, and the flags a newcomer reads first (no cluster needed).

The kubeconfig points at a port nobody listens on; every failure below happens before any request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gitops_sync import cli, engine
from gitops_sync.cli import output
from gitops_sync.engine import source_label
from gitops_sync.options import parse_duration
from gitops_sync.plan.masking import MASK, Redactor, mask_literals
from tests.unit.cli.test_cli_bad_input import KUBECONFIG

SECRET_VALUE = "hunter2-correct-horse"


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)  # a cluster nobody listens on
    return tmp_path / "kubeconfig"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\ndata: {a: b}\n")
    (root / "s.yaml").write_text(
        f"apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\nstringData: {{password: {SECRET_VALUE}}}\n"
    )
    return root


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli.main, list(args))


def json_doc(result: Result) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(result.stdout)  # exactly one JSON document, nothing else
    return doc


@pytest.mark.parametrize("command", ["sync", "diff"])
def test_json_output_on_a_source_error(tmp_path: Path, kubeconfig: Path, command: str) -> None:
    r = invoke(command, "--repo", str(tmp_path / "missing"), "--kubeconfig", str(kubeconfig), "-o", "json")
    assert r.exit_code == 2
    doc = json_doc(r)
    assert doc["errors"] and "missing" in doc["errors"][0]
    assert doc["summary"]["error"] == 1 and doc["objects"] == []
    assert doc["dryRun"] is (command == "diff")
    assert "error:" in r.stderr


@pytest.mark.parametrize("command", ["sync", "diff"])
def test_json_output_on_a_render_error(repo: Path, kubeconfig: Path, command: str) -> None:
    (repo / "bad.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n  x: [\n")
    r = invoke(command, "--repo", str(repo), "--kubeconfig", str(kubeconfig), "-o", "json")
    assert r.exit_code == 2
    assert "bad.yaml" in json_doc(r)["errors"][0]


def test_json_output_on_a_kubeconfig_error(repo: Path, tmp_path: Path) -> None:
    r = invoke("sync", "--repo", str(repo), "--kubeconfig", str(tmp_path / "nope"), "-o", "json")
    assert r.exit_code == 2
    doc = json_doc(r)
    assert "kubeconfig" in doc["errors"][0] and doc["source"] == str(repo)


def test_markdown_output_on_an_error(tmp_path: Path, kubeconfig: Path) -> None:
    r = invoke("diff", "--repo", str(tmp_path / "missing"), "--kubeconfig", str(kubeconfig), "-o", "markdown")
    assert r.exit_code == 2
    assert "> **error:**" in r.stdout


def test_table_output_on_an_error_keeps_stdout_empty(tmp_path: Path, kubeconfig: Path) -> None:
    r = invoke("diff", "--repo", str(tmp_path / "missing"), "--kubeconfig", str(kubeconfig))
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.startswith("error: ")


def _explode(message: str) -> Any:
    def boom(*_args: Any, **_kw: Any) -> Any:
        raise RuntimeError(message)

    return boom


@pytest.mark.parametrize("command", ["sync", "diff"])
def test_unexpected_exception_after_render_is_exit_2_one_masked_line(
    repo: Path, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setattr(engine, "Engine", _explode(f"boom near {SECRET_VALUE} at https://bob:tok3n@git.example/x.git"))
    r = invoke(command, "--repo", str(repo), "--kubeconfig", str(kubeconfig), "-o", "json")
    assert r.exit_code == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: gitops-sync {command} failed unexpectedly: RuntimeError: boom near ***")
    assert "Traceback" not in r.output
    for leak in (SECRET_VALUE, "tok3n"):
        assert leak not in r.output
    assert "RuntimeError" in json_doc(r)["errors"][0]


def test_unexpected_exception_traceback_only_with_debug_and_masked(
    repo: Path, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "Engine", _explode(f"value {SECRET_VALUE!r} https://bob:tok3n@git.example/x.git"))
    r = invoke("diff", "--repo", str(repo), "--kubeconfig", str(kubeconfig), "--log-level", "debug")
    assert r.exit_code == 2
    assert "Traceback (most recent call last)" in r.stderr and 'File "' in r.stderr
    assert SECRET_VALUE not in r.output and "tok3n" not in r.output
    assert r.stderr.splitlines()[-1].startswith("error: gitops-sync diff failed unexpectedly")


def test_unexpected_exception_while_rendering_masks_quoted_literals(
    repo: Path, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before rendering finished the Secret values are unknown: every quoted literal is masked."""
    monkeypatch.setattr(engine, "load", _explode(f"invalid literal for int() with base 10: '{SECRET_VALUE}'"))
    r = invoke("render", "--repo", str(repo))
    assert r.exit_code == 2
    assert "error: gitops-sync render failed unexpectedly: RuntimeError: invalid literal" in r.stderr
    assert SECRET_VALUE not in r.output and "'***'" in r.stderr


def test_a_real_unexpected_crash_in_render_is_masked(tmp_path: Path, kubeconfig: Path) -> None:
    """`!!int` on a Secret value raised ValueError with the value in it, exit 1 and a traceback."""
    root = tmp_path / "r"
    root.mkdir()
    (root / "s.yaml").write_text(
        f"apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\nstringData: {{password: !!int {SECRET_VALUE}}}\n"
    )
    for args in (["render"], ["diff", "--kubeconfig", str(kubeconfig), "-o", "json"]):
        r = invoke(*args, "--repo", str(root))
        assert r.exit_code == 2, r.output
        assert SECRET_VALUE not in r.output and "Traceback" not in r.output


def test_help_names_the_environment_and_describes_output() -> None:
    for args in ([], ["sync"], ["diff"], ["render"]):
        text = invoke(*args, "--help").stdout
        assert "GITOPS_SYNC_REPO" in text and "_GITOPS_SYNC_COMPLETE" in text, args
    diff_help = invoke("diff", "--help").stdout
    assert "-o, --output [table|json|markdown|html]" in diff_help and "jq" in diff_help


def test_timeout_takes_durations(repo: Path, tmp_path: Path) -> None:
    r = invoke("sync", "--repo", str(repo), "--kubeconfig", str(tmp_path / "nope"), "--wait", "--timeout", "1h30m")
    assert r.exit_code == 2 and "kubeconfig" in r.stderr  # accepted: the failure is the next step
    r = invoke("sync", "--repo", str(repo), "--timeout", "5 minutes")
    assert r.exit_code == 2 and "is not a duration" in r.output


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("1.5h", 5400), ("500ms", 0.5), ("2m30s", 150)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "m", "1h 30m", "-5", "inf", "nan", "5m-1s"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_render_shows_the_namespace_objects_get(repo: Path) -> None:
    (repo / "ns.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n")
    (repo / "other.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: o, namespace: elsewhere}\n")
    out = invoke("render", "--repo", str(repo), "-n", "prod").stdout
    docs = out.split("---\n")
    assert "# namespace: prod" in docs[0]
    by_name = {d.split("name: ")[1].split("\n")[0]: d for d in docs[1:]}
    assert "# namespace: prod (from -n)" in by_name["ok"]
    assert "# namespace:" not in by_name["team"]  # cluster-scoped
    assert "# namespace:" not in by_name["o"] and "namespace: elsewhere" in by_name["o"]
    assert SECRET_VALUE not in out


@pytest.mark.parametrize(
    ("repo", "sub", "ref", "label"),
    [
        (".", "clusters/prod", None, "clusters/prod"),
        ("./", "./clusters/prod/", None, "clusters/prod"),
        ("/srv/deploy/", "apps", "main", "/srv/deploy/apps@main"),
        (".", None, None, "."),
        (
            "https://u:p@git.example/deploy.git",
            "clusters/prod",
            "main",
            "https://***@git.example/deploy.git//clusters/prod@main",
        ),
        ("git@git.example:org/deploy.git", None, None, "git@git.example:org/deploy.git"),
    ],
)
def test_source_label_is_normalised(repo: str, sub: str | None, ref: str | None, label: str) -> None:
    assert source_label(repo, sub, ref) == label


def test_redactor_masks_every_spelling_of_a_secret_value() -> None:
    redact = Redactor(
        [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}, "data": {"k": "aHVudGVyMg=="}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}, "stringData": {"t": "line1\nline2"}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}, "stringData": {"n": "42"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}, "data": {"k": "public-value"}},
        ]
    )
    text = redact("aHVudGVyMg== hunter2 'line1\\nline2' line1\nline2 public-value 42 1425")
    assert text == f"{MASK} {MASK} '{MASK}' {MASK} public-value {MASK} 1425"


def test_mask_literals() -> None:
    assert mask_literals("""bad 'x' and "y\\"z" kept""") == "bad '***' and '***' kept"


def test_apply_and_wait_progress_share_one_live_display() -> None:
    """Two rich live displays at once raise LiveError: the bars are tasks of one Progress."""
    with output.progress(enabled=True, applying=25, waiting=3) as (tick, ready):
        assert tick is not None and ready is not None
        for _ in range(25):
            tick(None)
        for _ in range(3):
            ready(None)
    with output.progress(enabled=False, applying=25, waiting=3) as callbacks:
        assert callbacks == (None, None)


def test_shell_completion_as_the_readme_documents_it() -> None:
    env = {"_GITOPS_SYNC_COMPLETE": "bash_complete", "COMP_WORDS": "gitops-sync diff -o ", "COMP_CWORD": "3"}
    r = CliRunner().invoke(cli.main, [], env=env, prog_name="gitops-sync")
    assert r.exit_code == 0 and r.stdout.split() == ["plain,table", "plain,json", "plain,markdown", "plain,html"]
    source = CliRunner().invoke(cli.main, [], env={"_GITOPS_SYNC_COMPLETE": "bash_source"}, prog_name="gitops-sync")
    assert "_gitops_sync_completion()" in source.stdout
