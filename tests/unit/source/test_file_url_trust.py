"""A `file://` source (CLI `--repo file:///…`, a GitSync's `spec.repository` under --allow-local-repository)
is fetched over git's local transport: its upload-pack runs in a repository someone else may write, and git
strips GIT_CONFIG_* there, so safegit's configuration never reaches it. Nothing that repository configures may
run as us: fsmonitor, filters, hooks, uploadpack.packObjectsHook, core.sshCommand, gpg programs, nor the
commands of a lazy fetch a partial clone would start (remote.<name>.uploadpack, core.sshCommand). Real git;
each configured command leaves a marker. A git that hangs ends in a SourceError naming what timed out."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitops_sync.engine import SourceOptions, load
from gitops_sync.errors import SourceError
from gitops_sync.source import fetch
from gitops_sync.source.allow import LocalRepositories
from tests.unit.source.test_local_repository_trust import CM, _script, hostile
from tests.unit.source.test_safegit import hanging_repository


def _config(top: Path, *pairs: tuple[str, str]) -> None:
    for key, value in pairs:
        subprocess.run(["git", "config", "--file", str(top / ".git" / "config"), key, value], check=True)


def _more_commands(tmp_path: Path, top: Path, markers: Path) -> None:
    """Every other key that names a command, each leaving its own marker."""
    mark = _script(tmp_path / "mark2", f'touch "{markers}/$1"\ncat >/dev/null 2>&1 || true\nexit 1\n')
    _config(
        top,
        ("uploadpack.packObjectsHook", f"{mark} packObjectsHook"),
        ("core.sshCommand", f"{mark} sshCommand"),
        ("core.alternateRefsCommand", f"{mark} alternateRefsCommand"),
        ("gpg.program", f"{mark} gpg"),
        ("gpg.ssh.program", f"{mark} gpg-ssh"),
        ("credential.helper", f"!{mark} credential"),
        ("protocol.allow", "always"),
    )


def _names(source: SourceOptions) -> set[str]:
    return {o.manifest["metadata"]["name"] for o in load(source)[1]}


@pytest.mark.parametrize("revision", [None, "main"], ids=["remote-head", "branch"])
def test_a_file_url_runs_nothing_its_repository_configures(tmp_path: Path, revision: str | None) -> None:
    top, markers = hostile(tmp_path, "include")  # fsmonitor, smudge and clean filters, every hook
    _more_commands(tmp_path, top, markers)
    source = SourceOptions(repo=f"file://{top}", revision=revision, cache_dir=tmp_path / "cache")
    assert _names(source) == {"blob"}  # the blob's bytes, not the smudge filter's
    # the fleet's spelling: checked against --allow-local-repository, then read as its real path
    policy = LocalRepositories.of([tmp_path], tmp_path / "cache2")
    fleet = SourceOptions(repo=f"file://{top}", revision=revision, cache_dir=tmp_path / "cache2", local_policy=policy)
    assert _names(fleet) == {"blob"}
    assert sorted(os.listdir(markers)) == []


def _partial_clone(tmp_path: Path, promisor: str) -> tuple[Path, Path]:
    """A partial clone (its blobs left on its promisor remote) whose configuration makes a lazy fetch run a
    command: the remote's `uploadpack`, or `core.sshCommand` for an ssh promisor."""
    markers = tmp_path / "markers"
    markers.mkdir()
    origin = tmp_path / "origin"
    subprocess.run(["git", "init", "-q", "-b", "main", str(origin)], check=True)
    (origin / "cm.yaml").write_text(CM.format(name="lazy"))
    who = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "-C", str(origin), "add", "."], check=True)
    subprocess.run(["git", "-C", str(origin), *who, "commit", "-q", "-m", "one"], check=True)
    _config(origin, ("uploadpack.allowFilter", "true"))
    top = tmp_path / "partial"
    argv = ["git", "clone", "-q", "--filter=blob:none", "--no-checkout", f"file://{origin}", str(top)]
    subprocess.run(argv, check=True)
    mark = _script(tmp_path / "mark", f'touch "{markers}/$1"\nexit 1\n')  # the clone stays partial
    if promisor == "uploadpack":
        _config(top, ("remote.origin.uploadpack", f"{mark} uploadpack"), ("protocol.allow", "always"))
    else:
        ssh = _script(tmp_path / "ssh", f'touch "{markers}/sshCommand"\nexit 1\n')
        _config(top, ("remote.origin.url", "ssh://git.example.invalid/origin"), ("core.sshCommand", ssh))
    return top, markers


@pytest.mark.parametrize("promisor", ["uploadpack", "sshCommand"])
def test_a_partial_clone_behind_a_file_url_starts_no_lazy_fetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, promisor: str
) -> None:
    """Even when the controller's environment asks for lazy fetches (GIT_NO_LAZY_FETCH=0, as git before the
    upload-pack fix behaved): the fetch fails on the missing objects, naming the repository."""
    top, markers = _partial_clone(tmp_path, promisor)
    monkeypatch.setenv("GIT_NO_LAZY_FETCH", "0")
    # The repository does make a plain fetch with that environment run its command (the test can fail).
    scratch = tmp_path / "scratch"
    subprocess.run(["git", "init", "-q", "--bare", str(scratch)], check=True)
    subprocess.run(["git", "-C", str(scratch), "fetch", "-q", f"file://{top}", "main"], capture_output=True)
    assert os.listdir(markers) == [promisor]
    os.unlink(markers / promisor)
    with pytest.raises(SourceError) as caught:
        fetch(f"file://{top}", "main", cache_dir=tmp_path / "cache", timeout=30)
    assert str(caught.value).startswith(f"git failed fetching file://{top}: ")
    assert "promisor remote" in str(caught.value)
    argv = [sys.executable, "-m", "gitops_sync", "render", "--repo", f"file://{top}"]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and f"file://{top}" in done.stderr and "Traceback" not in done.stderr
    assert sorted(os.listdir(markers)) == []


def test_a_file_url_whose_git_hangs_ends_with_the_timeout_named(tmp_path: Path) -> None:
    top, _ = hanging_repository(tmp_path)
    started = time.monotonic()
    with pytest.raises(SourceError) as caught:
        fetch(f"file://{top}", "main", cache_dir=tmp_path / "cache", timeout=1)
    assert str(caught.value) == f"cannot reach {top}: no answer within 1s fetching file://{top}"
    assert time.monotonic() - started < 15


def test_a_local_repository_whose_git_hangs_ends_with_the_subcommand_named(tmp_path: Path) -> None:
    """A revision and a work tree's HEAD, each with the timeout given to fetch (GitPython's own read of HEAD
    had none: it hung for ever): the hung git is named, never "unknown revision"."""
    top, _ = hanging_repository(tmp_path)
    with pytest.raises(SourceError) as caught:
        fetch(str(top), "main", cache_dir=tmp_path / "cache", timeout=1)
    assert str(caught.value) == f"{top}: cannot resolve 'main': git rev-parse timed out after 1s"
    started = time.monotonic()
    with pytest.raises(SourceError) as caught:
        fetch(str(top), cache_dir=tmp_path / "cache", timeout=1)
    assert str(caught.value) == f"{top}: cannot resolve 'HEAD': git rev-parse timed out after 1s"
    assert time.monotonic() - started < 15


def test_a_work_tree_whose_index_hangs_ends_with_the_subcommand_named(tmp_path: Path) -> None:
    """ls-files of the submodule look-up ran with no timeout at all: an index that is a FIFO (a repository
    someone else writes) hung the fetch for ever."""
    top, _ = hanging_repository(tmp_path)
    os.unlink(top / ".git" / "objects" / "info" / "alternates")
    os.unlink(top / ".git" / "index")
    os.mkfifo(top / ".git" / "index")
    started = time.monotonic()
    with pytest.raises(SourceError) as caught:
        fetch(str(top), cache_dir=tmp_path / "cache", timeout=1)
    assert str(caught.value) == f"{top}: cannot read the Git index of {top}: git ls-files timed out after 1s"
    assert time.monotonic() - started < 15
