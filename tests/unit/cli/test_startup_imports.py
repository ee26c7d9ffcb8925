"""Start-up: each command imports only what it needs (issue 13). A structural check, not a timing test:
the modules a command pulls in are read from `sys.modules` of a real `gitops-sync` process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# What a one-shot command must not pay for unless it uses it: the table's and the log renderer's rich, the web
# page's jinja2, the daemon's server, metrics and file watch, and the official Kubernetes client (pydantic
# models, ~0.2 s) when no cluster is contacted.
HEAVY = ("rich", "jinja2", "waitress", "prometheus_client", "watchdog", "gitops_sync.daemon", "gitops_sync.web")
CLUSTER = ("kubernetes", "pydantic", "urllib3")
# The pipeline: `--version` and `--help` need none of it.
PIPELINE = (
    "gitops_sync.engine",
    "gitops_sync.report",
    "gitops_sync.plan",
    "gitops_sync.render",
    "gitops_sync.source",
    "gitops_sync.cluster",
    "yaml",
    "git",
)

_PROBE = """
import json, sys
sys.argv = ["gitops-sync", *sys.argv[1:]]
from gitops_sync.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open({out!r}, "w") as f:
    json.dump({{"code": code, "modules": sorted(sys.modules), "gc": __import__("gc").get_threshold()}}, f)
"""


def _run(tmp_path: Path, *args: str) -> dict[str, Any]:
    """Run the CLI with `args` in a fresh interpreter: exit code, imported modules, GC thresholds at exit."""
    out = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", _PROBE.format(out=str(out)), *args],
        capture_output=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _imported(tmp_path: Path, *args: str) -> tuple[int, set[str]]:
    """Run the CLI with `args` in a fresh interpreter; its exit code and the top-level packages it imported."""
    doc = _run(tmp_path, *args)
    names = set(doc["modules"])
    return doc["code"], names | {n.split(".")[0] for n in names}


def _loaded(names: set[str], wanted: tuple[str, ...]) -> list[str]:
    return [w for w in wanted if w in names]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    d = tmp_path / "repo"
    d.mkdir()
    (d / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n")
    return d


def _refusing_kubeconfig(tmp_path: Path) -> Path:
    """A token kubeconfig of a server that refuses connections (port 1)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return kubeconfig


def test_version_imports_no_heavy_module(tmp_path: Path) -> None:
    code, names = _imported(tmp_path, "--version")
    assert code == 0
    assert _loaded(names, (*HEAVY, *CLUSTER, *PIPELINE)) == []
    assert "structlog" not in names  # nothing is logged


def test_help_imports_no_pipeline_module(tmp_path: Path) -> None:
    code, names = _imported(tmp_path, "--help")
    assert code == 0
    assert _loaded(names, (*HEAVY, *CLUSTER, *PIPELINE)) == []


@pytest.mark.parametrize("limit", [30, 45, 80, 200])
def test_help_lists_each_lazy_command_as_its_own_help_would(limit: int) -> None:
    """The summaries kept in cli.group._Commands._lazy (so that `--help` imports no daemon) say what each
    command's own help says, at every terminal width."""
    import importlib

    import click

    from gitops_sync.cli import main

    assert isinstance(main, click.Group)
    lazy = main._lazy  # type: ignore[attr-defined]
    for name, (module, attr, summary) in lazy.items():
        command = getattr(importlib.import_module(module), attr)
        assert click.Command(name, help=summary).get_short_help_str(limit) == command.get_short_help_str(limit)


def test_render_imports_no_heavy_module(tmp_path: Path, repo: Path) -> None:
    code, names = _imported(tmp_path, "render", "--repo", str(repo))
    assert code == 0
    assert _loaded(names, (*HEAVY, *CLUSTER)) == []


def test_diff_json_imports_no_heavy_module(tmp_path: Path, repo: Path) -> None:
    """`diff -o json` needs urllib3 only; a server that refuses the connection ends it (exit 2)."""
    kubeconfig = _refusing_kubeconfig(tmp_path)
    code, names = _imported(tmp_path, "diff", "--repo", str(repo), "-o", "json", "--kubeconfig", str(kubeconfig))
    assert code == 2  # connection refused: the command did reach the cluster client
    assert "urllib3" in names
    assert "git" not in names  # a plain directory: GitPython is not needed (source/gitdir.py)
    # A token kubeconfig is read without the official client (cluster/kubeconfig.py).
    assert _loaded(names, (*HEAVY, "kubernetes", "pydantic")) == []


def test_a_level_that_logs_nothing_never_imports_structlog(tmp_path: Path, repo: Path) -> None:
    """`render` at the default level (warning) logs nothing: structlog (~20 ms) stays out (tests/unit/
    test_log.py shows lines at or above the level are still written)."""
    code, names = _imported(tmp_path, "render", "--repo", str(repo))
    assert code == 0
    assert "structlog" not in names


def test_one_shot_commands_collect_the_young_generation_rarely(tmp_path: Path, repo: Path) -> None:
    """Growth faster than linear at 20,000 objects came from the cyclic collector's repeated full passes
    over everything rendered and read (cli.attempt.load_source); `render`, `sync` and `diff` raise its thresholds."""
    doc = _run(tmp_path, "render", "--repo", str(repo))
    assert doc["code"] == 0
    assert doc["gc"][0] >= 100_000


SERVER = (
    "waitress",
    "prometheus_client",
    "watchdog",
    "git",
    "gitops_sync.daemon.reconcile.reconciler",
    "gitops_sync.daemon.runtime",
    "gitops_sync.daemon.serving",
)


@pytest.mark.parametrize(
    "args",
    [("get",), ("get", "app"), ("reconcile", "app"), ("suspend", "app"), ("resume", "app")],
    ids=lambda a: " ".join(a),
)
def test_the_fleet_client_commands_import_no_server_library(tmp_path: Path, args: tuple[str, ...]) -> None:
    """`get`/`reconcile`/`suspend`/`resume` read or patch GitSync objects: the GitSync model only, none of
    the daemon's server, metrics, file watch, Git or reconciler (daemon/fleet/gitsync.py vs status.py)."""
    kubeconfig = _refusing_kubeconfig(tmp_path)
    code, names = _imported(tmp_path, *args, "--kubeconfig", str(kubeconfig))
    assert code == 2  # connection refused: the command did reach the cluster client
    assert "gitops_sync.daemon.fleet.gitsync" in names
    assert _loaded(names, SERVER) == []
