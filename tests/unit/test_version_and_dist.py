"""`gitops-sync --version` names the commit (from Git in a checkout, baked into a built package), and `make dist`'s
build (sdist, then the wheel from it) prints no deprecation banner. Real builds, no mocks."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from gitops_sync import __version__
from gitops_sync.version import git_commit

ROOT = Path(__file__).resolve().parents[2]


def _version_line(*, cwd: Path, pythonpath: Path | None = None) -> str:
    env = {**os.environ}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run(
        [sys.executable, "-c", "import gitops_sync, sys; print(gitops_sync.__file__); sys.argv[1:] = ['--version'];"
         " from gitops_sync.cli import main; main()"],
        capture_output=True, text=True, timeout=60, cwd=cwd, env=env, check=True,
    )  # fmt: skip
    return done.stdout


def test_version_from_a_checkout_reads_git(tmp_path: Path) -> None:
    head = git_commit(ROOT)
    assert head is not None, "the tests run from a Git checkout"
    out = _version_line(cwd=tmp_path)
    assert out.splitlines()[-1] == f"gitops-sync, version {__version__} (commit {head})"


def test_dist_builds_quietly_and_bakes_the_commit(tmp_path: Path) -> None:
    """The sdist is built first and the wheel from the unpacked sdist (no .git there): the commit travels in it."""
    env = {k: v for k, v in os.environ.items() if k != "GITOPS_SYNC_COMMIT"}
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(ROOT)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    # setuptools' deprecations come as banners of `!!` lines ("SetuptoolsDeprecationWarning: `project.license`
    # as a TOML table is deprecated").
    assert "Deprecat" not in output and "!!" not in output, output[-3000:]
    wheels = list((tmp_path / "dist").glob("gitops_sync-*.whl"))
    assert len(wheels) == 1 and len(list((tmp_path / "dist").glob("gitops_sync-*.tar.gz"))) == 1
    head = git_commit(ROOT)
    assert head is not None
    with zipfile.ZipFile(wheels[0]) as whl:
        assert whl.read("gitops_sync/COMMIT").decode().strip() == head
        metadata = whl.read(f"gitops_sync-{__version__}.dist-info/METADATA").decode()
        whl.extractall(tmp_path / "site")
    assert "License-Expression: Apache-2.0" in metadata
    # The installed package (not this checkout) answers, with the baked commit.
    first, last = _version_line(cwd=tmp_path, pythonpath=tmp_path / "site").splitlines()
    assert Path(first).is_relative_to(tmp_path / "site")
    assert last == f"gitops-sync, version {__version__} (commit {head})"
