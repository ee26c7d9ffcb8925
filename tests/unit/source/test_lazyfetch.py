"""The fleet's probe of git's lazy fetch on a served `file://` fetch (source/lazyfetch.py), with real git.

A git whose upload-pack ignores GIT_NO_LAZY_FETCH (git before the 2.39.4/…/2.45.1 fix) is played by a `git`
first on PATH that sets it to 0 before running the real one: the variable crosses the local transport, so
the served side then lazy-fetches exactly as an old one does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gitops_sync.errors import SourceError
from gitops_sync.source.lazyfetch import serving_lazy_fetches


@pytest.fixture
def old_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    real = shutil.which("git")
    assert real is not None
    bin_dir = tmp_path / "old-git"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f'#!/bin/sh\nGIT_NO_LAZY_FETCH=0\nexport GIT_NO_LAZY_FETCH\nexec {real} "$@"\n')
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def test_this_machines_git_serves_no_lazy_fetch() -> None:
    assert serving_lazy_fetches() is False


def test_a_git_that_lazy_fetches_when_serving_is_found(old_git: Path) -> None:
    assert serving_lazy_fetches() is True


def test_the_fleet_refuses_local_repositories_on_such_a_git(old_git: Path, tmp_path: Path) -> None:
    """Before any cluster is reached: exit 2, the reason and the way out, no traceback."""
    argv = [sys.executable, "-m", "gitops_sync", "run", "--allow-local-repository", str(tmp_path)]
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "no-such-kubeconfig")}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "starts a lazy fetch" in done.stderr and "2.39.4" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_probe_that_cannot_run_names_git_s_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken-git"
    broken.mkdir()
    (broken / "git").write_text('#!/bin/sh\necho "fatal: out of disk" >&2\nexit 128\n')
    (broken / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{broken}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(SourceError, match=r"cannot probe git's lazy fetch \(git init\): fatal: out of disk"):
        serving_lazy_fetches()
