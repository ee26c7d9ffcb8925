"""safegit's environment wins over what a repository configures: its command-running keys read harmless
values and no transport is allowed, whatever `protocol.*.allow` the repository sets. Real git."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from gitops_sync.errors import SourceError
from gitops_sync.source.safegit import SAFE_CONFIG, run_git, safe_env, subcommand


def _repo(tmp_path: Path, config: str) -> Path:
    top = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    with (top / ".git" / "config").open("a") as f:
        f.write(config)
    return top


@pytest.mark.parametrize("key", [k for k, _ in SAFE_CONFIG])
def test_each_key_reads_our_value_over_the_repository_s(tmp_path: Path, key: str) -> None:
    section, _, name = key.rpartition(".")
    if "." in section:
        head, _, sub = section.partition(".")
        block = f'[{head} "{sub}"]\n\t{name} = /tmp/evil\n'
    else:
        block = f"[{section}]\n\t{name} = /tmp/evil\n"
    top = _repo(tmp_path, block)
    env = {**os.environ, **safe_env()}
    done = subprocess.run(["git", "-C", str(top), "config", "--get", key], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == dict(SAFE_CONFIG)[key]


def test_no_transport_runs_whatever_protocol_the_repository_allows(tmp_path: Path) -> None:
    """An `ext::` URL runs a command; a repository allowing it (protocol.ext.allow) must not get it run."""
    marker = tmp_path / "marker"
    top = _repo(tmp_path, '[protocol]\n\tallow = always\n[protocol "ext"]\n\tallow = always\n')
    url = f"ext::sh -c touch% {marker}"
    env = {**os.environ, **safe_env()}
    done = subprocess.run(["git", "-C", str(top), "fetch", url], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "not allowed" in done.stderr
    assert not marker.exists()
    # the same without our environment does run it (the test can fail)
    subprocess.run(["git", "-C", str(top), "fetch", url], capture_output=True, check=False)
    assert marker.exists()


def hanging_repository(tmp_path: Path) -> tuple[Path, str]:
    """A committed work tree (its commit's SHA) in which every git that reads an object hangs: its alternates
    file is a FIFO nobody writes, as a stalled network file system would leave a real git."""
    top = tmp_path / "hung"
    subprocess.run(["git", "init", "-q", "-b", "main", str(top)], check=True)
    (top / "cm.yaml").write_text("kind: ConfigMap\n")
    subprocess.run(["git", "-C", str(top), "add", "."], check=True)
    who = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "-C", str(top), *who, "commit", "-q", "-m", "one"], check=True)
    sha = subprocess.run(["git", "-C", str(top), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    os.mkfifo(top / ".git" / "objects" / "info" / "alternates")
    return top, sha.stdout.strip()


def test_run_git_names_what_was_done_and_the_subcommand_that_hung(tmp_path: Path) -> None:
    top, sha = hanging_repository(tmp_path)
    env = {**os.environ, **safe_env()}
    started = time.monotonic()
    with pytest.raises(SourceError) as caught:
        run_git(["git", "-C", str(top), "ls-tree", "-r", sha], env, 1, prefix="repo: cannot list it: ")
    assert str(caught.value) == "repo: cannot list it: git ls-tree timed out after 1s"
    assert time.monotonic() - started < 10


def test_run_git_says_git_s_last_line_or_returns_an_accepted_status(tmp_path: Path) -> None:
    top = _repo(tmp_path, "")
    env = {**os.environ, **safe_env()}
    argv = ["git", "-C", str(top), "rev-parse", "--verify", "nope"]
    with pytest.raises(SourceError) as caught:
        run_git(argv, env, 30, prefix="repo: cannot resolve: ")
    assert str(caught.value) == "repo: cannot resolve: fatal: Needed a single revision"
    assert run_git(argv, env, 30, ok=(0, 128)).returncode == 128
    with pytest.raises(SourceError, match=r"^repo: the `git` command is not installed \(it must be on PATH\)$"):
        run_git(argv, {**env, "PATH": str(tmp_path / "nowhere")}, 30, prefix="repo: ")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["git", "-C", "/x", "--git-dir=/y", "ls-tree", "-r"], "ls-tree"),
        (["git", "-c", "a.b=c", "cat-file", "--batch"], "cat-file"),
        (["git", "--version"], "(no subcommand)"),
    ],
)
def test_the_subcommand_is_found_past_git_s_own_options(argv: list[str], expected: str) -> None:
    assert subcommand(argv) == expected
