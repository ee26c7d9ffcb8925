"""Bakes the Git commit into the built package (gitops_sync/COMMIT), read by gitops_sync/version.py.

Everything else about the build is in pyproject.toml. The commit comes from $GITOPS_SYNC_COMMIT (the image
build, whose context has no .git), else from Git when building in a checkout, else from the COMMIT file an
sdist carries (a wheel built from the sdist).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
COMMIT = Path("gitops_sync", "COMMIT")


def _git_commit() -> str | None:
    """gitops_sync/version.py's reading of Git, loaded by path: the package itself is not importable here."""
    spec = importlib.util.spec_from_file_location("_gitops_sync_version_reader", HERE / "gitops_sync" / "version.py")
    if spec is None or spec.loader is None:  # pragma: no cover - the file ships with this setup.py
        return None
    if not (HERE / ".git").exists():
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: str | None = module.git_commit(HERE)
    return found


def _commit() -> str | None:
    from_env = os.environ.get("GITOPS_SYNC_COMMIT", "").strip()
    if from_env:
        return from_env
    from_git = _git_commit()
    if from_git:
        return from_git
    shipped = HERE / COMMIT  # an sdist's
    return shipped.read_text(encoding="utf-8").strip() if shipped.is_file() else None


class BuildPy(build_py):
    """Writes COMMIT next to the package's modules in the wheel (not in an editable install: Git answers)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        found = _commit()
        if found:
            target = Path(self.build_lib, COMMIT)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(found + "\n", encoding="utf-8")


class Sdist(sdist):
    """Writes COMMIT into the sdist, so a wheel built from it (no .git there) still knows its commit."""

    def make_release_tree(self, base_dir: str, files: Any) -> None:
        super().make_release_tree(base_dir, files)
        found = _commit()
        if found:
            target = Path(base_dir, COMMIT)
            if target.exists():
                target.unlink()  # a hard link to the source tree's file: never write through it
            target.write_text(found + "\n", encoding="utf-8")


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
