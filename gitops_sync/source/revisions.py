"""What a revision string says and how two revisions relate: a commit, a work tree's `-dirty`, ancestry.

The engine asks `is_ancestor` before it follows a branch that moved (a force-push back to an older commit
is refused until --allow-rollback) and `knows_commit` before it trusts a record made from another spelling
of a local repository; every report prints `short_revision`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from gitops_sync.source.gitdir import might_be_repository
from gitops_sync.source.remote import is_remote, mask_url
from gitops_sync.source.safegit import run_git, safe_env

if TYPE_CHECKING:
    from gitops_sync.source.checkout import Checkout

DIRTY = "-dirty"  # suffix of the revision of a work tree with uncommitted changes
_SHA = re.compile(r"[0-9a-f]{40}")


def short_revision(revision: str, length: int = 12) -> str:
    """`3f2c…(12)` with the `-dirty` marker kept: shortened first, then the suffix, so a report never
    names a clean commit for uncommitted files."""
    sha, dirty, _ = revision.partition(DIRTY)
    return sha[:length] + (DIRTY if dirty else "")


def knows_commit(repo: str, sha: str, timeout: float = 60) -> bool:
    """Whether commit `sha` exists in the local repository `repo`: evidence that a record made from a
    relative `--repo` spelling was made from this very repository. Never true for a remote URL. A git that
    hangs raises SourceError naming it (nothing is taken for evidence)."""
    if is_remote(repo) or not _SHA.fullmatch(sha) or not might_be_repository(Path(repo)):
        return False
    import git  # GitPython: only for sources that are Git repositories (~30 ms to import)
    from git.exc import InvalidGitRepositoryError, NoSuchPathError

    try:
        local = git.Repo(Path(repo).expanduser(), search_parent_directories=True)
    except (InvalidGitRepositoryError, NoSuchPathError, OSError):
        return False
    with local:
        argv = ["git", f"--git-dir={local.git_dir}", "cat-file", "-e", f"{sha}^{{commit}}"]
        done = run_git(argv, _env(), timeout, prefix=f"{repo}: cannot look for commit {sha[:12]}: ", ok=(0, 1, 128))
    return done.returncode == 0


def is_ancestor(checkout: Checkout, older: str, newer: str, timeout: float = 60) -> bool | None:
    """Whether commit `older` comes strictly before `newer` in the history of `checkout`'s repository.

    None when that cannot be told: a plain directory, a revision that is not a commit, a commit this clone
    or work tree does not have (a shallow CI checkout). A work tree's `-dirty` marker is ignored. A git that
    hangs raises SourceError naming it: the pass ends, never goes on as if it could not be told."""
    a, b = older.removesuffix(DIRTY), newer.removesuffix(DIRTY)
    if not (_SHA.fullmatch(a) and _SHA.fullmatch(b)):
        return None
    if a == b:
        return False
    where = checkout.git_dir or checkout.repo_root or checkout.root
    if checkout.git_dir is None and not might_be_repository(where):
        return None
    import git
    from git.exc import InvalidGitRepositoryError, NoSuchPathError

    try:
        repo = git.Repo(where, search_parent_directories=True)
    except (InvalidGitRepositoryError, NoSuchPathError, OSError):
        return None
    with repo:
        argv = ["git", f"--git-dir={repo.git_dir}", "merge-base", "--is-ancestor", a, b]
        prefix = f"{mask_url(checkout.repo)}: cannot tell whether {a[:12]} comes before {b[:12]}: "
        done = run_git(argv, _env(), timeout, prefix=prefix, ok=(0, 1, 128, 129))
    # 1: not an ancestor; else a commit it does not have
    return True if done.returncode == 0 else False if done.returncode == 1 else None


def _env() -> dict[str, str]:
    """A repository we do not own (safegit.py)."""
    return {**os.environ, **safe_env(), "LC_ALL": "C"}
