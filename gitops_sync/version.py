"""Version and commit for `gitops-sync --version` (standard library only: `--version` imports no pipeline).

The commit is baked into the package at build time (setup.py writes `gitops_sync/COMMIT` into the wheel and
the sdist); running from a Git checkout (an editable install) it is read from Git instead. Nothing else reads
it: the CLI prints it and the image's labels carry the same value.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# Written by setup.py at build time; never committed (.gitignore).
COMMIT_FILE = PACKAGE_DIR / "COMMIT"
UNKNOWN = "unknown"


def _git(work_tree: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(work_tree), *args], capture_output=True, text=True, timeout=10, check=True
    ).stdout.strip()


def git_commit(work_tree: Path) -> str | None:
    """HEAD of the checkout at `work_tree`, with `-dirty` when tracked files differ from it; None outside Git."""
    try:
        head = _git(work_tree, "rev-parse", "--verify", "HEAD")
        changed = _git(work_tree, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if changed else head


def commit() -> str:
    """The baked commit of an installed package, else Git's when this package is a checkout, else `unknown`."""
    try:
        baked = COMMIT_FILE.read_text(encoding="utf-8").strip()
    except OSError:
        baked = ""
    if baked:
        return baked
    checkout = PACKAGE_DIR.parent
    if (checkout / ".git").exists():
        return git_commit(checkout) or UNKNOWN
    return UNKNOWN


def describe() -> str:
    """`0.1.0 (commit 0123…)`: what `gitops-sync --version` prints after the program's name."""
    from gitops_sync import __version__  # here, so that setup.py can load this file on its own

    return f"{__version__} (commit {commit()})"
