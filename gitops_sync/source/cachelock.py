"""One git at a time per cache repository, and the lock files a dead git left behind.

Every git command on a cache runs under our own per-repository flock (`<cache>/<repo>/lock`): git itself
fails on concurrent ref updates. A git `*.lock` file found in the cache while we hold that flock was left
by a git process that died (an OOM kill, a timeout): once it is a few seconds old it is removed, and the
removal is logged. The clone cache (clonecache.py) and `checkout.fetch` take the flock.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Iterator
from pathlib import Path

from gitops_sync.errors import SourceError
from gitops_sync.log import get_logger

log = get_logger(__name__)

# A git lock file this old, found while we hold the cache's flock, belongs to no live git process of ours.
STALE_LOCK_AGE = 5.0


def clear_stale_locks(git_dir: Path, min_age: float = STALE_LOCK_AGE) -> list[Path]:
    """Remove git lock files left in a cache repository by a git process that died; call only under `locked`.

    Holding our flock means no fetch or checkout of ours runs on this repository, so a lock file older than
    `min_age` is stale (the age spares a git process someone started by hand a moment ago). Returns what went.
    """
    candidates = [*git_dir.glob("*.lock"), *git_dir.glob("refs/**/*.lock"), *git_dir.glob("objects/info/*.lock")]
    removed: list[Path] = []
    now = time.time()
    for lock in candidates:
        try:
            age = now - lock.lstat().st_mtime
            if age < min_age:
                log.info("git lock file left in place: too recent to be stale", path=str(lock), age_s=round(age, 1))
                continue
            lock.unlink()
        except OSError:
            continue
        removed.append(lock)
        log.warning("removed a stale git lock file from the clone cache", path=str(lock), age_s=round(age, 1))
    return removed


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """One fetch per repository cache at a time (git itself fails on concurrent ref updates)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle = open(directory / "lock", "a+")  # noqa: SIM115 - held for the whole block
    except OSError as err:
        raise SourceError(f"cannot use the cache directory {directory}: {err.strerror}") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
