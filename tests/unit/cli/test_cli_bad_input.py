"""Bad input through the real CLI: exit 2, a message naming the file/object/host, and no cluster access.

The kubeconfig points at a port nobody listens on: if any of these reached the cluster stage, the error
would name 127.0.0.1:9 instead of the file, so each test also proves nothing was sent.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitops_sync.cli import main

KUBECONFIG = textwrap.dedent("""
    apiVersion: v1
    kind: Config
    clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
    users: [{name: u, user: {token: t}}]
    contexts: [{name: x, context: {cluster: c, user: u}}]
    current-context: x
""")


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    p = tmp_path / "kubeconfig"
    p.write_text(KUBECONFIG)
    return p


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def good(repo: Path) -> None:
    (repo / "ok.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n")


@pytest.mark.parametrize("command", ["sync", "diff"])
@pytest.mark.parametrize(
    ("name", "content", "expect"),
    [
        ("bad.yaml", "apiVersion: v1\nkind: ConfigMap\n  x: [\n", r"bad.yaml:\d+"),
        ("noname.yaml", "apiVersion: v1\nkind: ConfigMap\ndata: {a: b}\n", "noname.yaml"),
        ("nokind.yaml", "apiVersion: v1\nmetadata: {name: x}\n", "kind"),
        (
            "bomb.yaml",
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                for p, c in zip("abcdefg", "bcdefgh", strict=True)
            ),
            "bomb.yaml",
        ),
    ],
)
def test_broken_manifest_exits_2_naming_the_file(
    tmp_path: Path, kubeconfig: Path, command: str, name: str, content: str, expect: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    good(repo)
    (repo / name).write_text(content)
    code, out = run(command, "--repo", str(repo), "--kubeconfig", str(kubeconfig))
    assert code == 2, out
    assert re.search(expect, out), out
    assert "127.0.0.1:9" not in out


def test_oversized_file_and_symlink_escape(tmp_path: Path, kubeconfig: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    good(repo)
    with open(repo / "huge.yaml", "wb") as f:
        f.truncate(10 * 1024 * 1024 + 1)
    code, out = run("sync", "--repo", str(repo), "--kubeconfig", str(kubeconfig))
    assert code == 2 and "huge.yaml" in out, out
    os.remove(repo / "huge.yaml")
    outside = tmp_path / "secret.yaml"
    outside.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\n")
    (repo / "link.yaml").symlink_to(outside)
    code, out = run("sync", "--repo", str(repo), "--kubeconfig", str(kubeconfig))
    assert code == 2 and "link.yaml" in out, out


def test_unreachable_git_remote_names_the_host(tmp_path: Path, kubeconfig: Path) -> None:
    code, out = run(
        "diff",
        "--repo",
        "https://127.0.0.1:9/org/repo.git",
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert code == 2, out
    assert "127.0.0.1" in out and "Traceback" not in out


def test_unknown_revision_of_a_local_repository(tmp_path: Path, kubeconfig: Path) -> None:
    import git

    repo = tmp_path / "repo"
    g = git.Repo.init(repo)
    good(repo)
    g.index.add(["ok.yaml"])
    g.index.commit("init")
    code, out = run(
        "sync",
        "--repo",
        str(repo),
        "--revision",
        "v9.9.9",
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert code == 2 and "v9.9.9" in out, out


def test_render_needs_no_cluster_and_masks_secrets(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "s.yaml").write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {token: hunter2}\n")
    code, out = run("render", "--repo", str(repo))
    assert code == 0 and "hunter2" not in out and "***" in out, out
    code, out = run("render", "--repo", str(repo), "--show-secrets")
    assert code == 0 and "hunter2" in out, out
