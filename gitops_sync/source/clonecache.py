"""The clone cache on disk: one bare repository per remote, and each commit's files materialised once.

A commit is written aside into `trees/.tmp-*` and renamed into `trees/<sha>` (atomic), so concurrent
readers never see a half-updated tree and the user's own work tree is never touched; the least recently
used trees are dropped past `_KEEP_TREES`. `checkout.fetch` renders from the directory returned here, and
the render cache (rendercache.py) keeps its entries in a sub-directory of `cache_root`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gitops_sync.errors import SourceError
from gitops_sync.source.giterrors import stderr_tail
from gitops_sync.source.remote import GIT_ENV, mask_url
from gitops_sync.source.treewrite import write_commit

if TYPE_CHECKING:
    import git

_KEEP_TREES = 8  # materialised commits kept per repository; older ones are removed on the next fetch


def cache_root(cache_dir: Path | None) -> Path:
    """The clone cache's directory: `cache_dir` or `$XDG_CACHE_HOME/gitops-sync/repos` (the render cache
    keeps its entries in a sub-directory of it). Absolute and without symlinks: git runs in the cache's own
    directories, where a relative path would mean something else."""
    return (cache_dir if cache_dir is not None else _default_cache_dir()).expanduser().resolve()


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gitops-sync" / "repos"


def open_bare(git_dir: Path, name: str) -> git.Repo:
    """The cache's bare repository for a remote, created on first use (and again if a first clone broke it)."""
    import git
    from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

    try:
        bare = git.Repo(git_dir) if (git_dir / "HEAD").exists() else git.Repo.init(git_dir, bare=True)
    except (InvalidGitRepositoryError, NoSuchPathError, GitCommandError):
        # A cache broken by an interrupted first clone: start again rather than fail for ever.
        shutil.rmtree(git_dir, ignore_errors=True)
        try:
            bare = git.Repo.init(git_dir, bare=True)
        except GitCommandError as err:
            raise SourceError(f"{name}: cannot create the cache at {git_dir}: {stderr_tail(err.stderr)}") from None
    bare.git.update_environment(**GIT_ENV)
    if not os.environ.get("GIT_SSH_COMMAND") and not os.environ.get("GIT_SSH"):
        bare.git.update_environment(GIT_SSH_COMMAND="ssh -o BatchMode=yes")
    return bare


def materialise(repo: git.Repo, sha: str, trees: Path, name: str, timeout: float) -> Path:
    """The files of commit `sha` in `trees/<sha>`, written aside and renamed into place (atomic)."""
    final = trees / sha
    if final.is_dir():
        os.utime(final)  # mark as recently used, so pruning keeps it
        return final
    trees.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{sha[:12]}-", dir=trees))
    # Written from the blobs (treewrite.py), never `checkout-index`: no filter or conversion the repository's
    # own configuration names runs; the repository's index, HEAD and work tree are never touched.
    try:
        write_commit(Path(repo.git_dir), sha, staging, timeout)
        os.rename(staging, final)
    except SourceError as err:
        raise SourceError(f"{mask_url(name)}: cannot check out {sha}: {err}") from None
    except OSError:
        if not final.is_dir():  # someone else renamed the same commit into place first: theirs serves
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _prune_trees(trees, keep=final)
    return final


def _prune_trees(trees: Path, keep: Path) -> None:
    """Drop all but the most recently used checkouts (renamed away first so no reader sees a partial tree).

    Leftovers of an interrupted run (`.tmp-*`, `.trash-*`) older than an hour go too.
    """
    entries: list[Path] = []
    for entry in trees.iterdir():
        if entry.name.startswith("."):
            if time.time() - entry.lstat().st_mtime > 3600:
                _remove(entry)
        elif entry.is_dir() and entry != keep:
            entries.append(entry)
    entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[_KEEP_TREES - 1 :]:
        trash = trees / f".trash-{old.name}-{os.getpid()}-{time.monotonic_ns()}"
        with contextlib.suppress(OSError):
            os.rename(old, trash)
            _remove(trash)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
