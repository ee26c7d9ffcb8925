"""Git faults of the one-shot path: stale lock files in the clone cache, git's real reason kept in the error,
an unreadable remote reported as such. Real git against file:// remotes; no cluster needed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import git
import pytest
from structlog.testing import capture_logs

from gitops_sync.errors import SourceError
from gitops_sync.source import fetch
from tests.reliability.conftest import Recorder

ACTOR = git.Actor("Test", "test@example.invalid")
REPO_ROOT = Path(__file__).resolve().parents[2]
LOCKS = ("refs/heads/main.lock", "packed-refs.lock", "index.lock", "shallow.lock")


def _commit(work: git.Repo, name: str, text: str) -> str:
    (Path(work.working_tree_dir or "") / name).write_text(text)
    work.git.add("--all")
    return work.index.commit(f"write {name}", author=ACTOR, committer=ACTOR).hexsha


@pytest.fixture
def remote(tmp_path: Path) -> tuple[str, git.Repo]:
    """A bare repository served as file://, and a work tree that pushes to it."""
    bare = git.Repo.init(tmp_path / "remote.git", bare=True, initial_branch="main")
    work = git.Repo.init(tmp_path / "work", initial_branch="main")
    _commit(work, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
    work.create_remote("origin", str(bare.git_dir))
    work.git.push("origin", "main")
    return f"file://{bare.git_dir}", work


def _cache_repo(cache: Path, url: str) -> Path:
    return cache / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:24]


def _plant(git_dir: Path, age: float) -> list[Path]:
    planted = []
    for name in LOCKS:
        p = git_dir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
        os.utime(p, (time.time() - age, time.time() - age))
        planted.append(p)
    return planted


def test_a_fresh_lock_fails_the_fetch_naming_the_lock_and_a_stale_one_is_cleared(
    tmp_path: Path, remote: tuple[str, git.Repo], reliability: Recorder
) -> None:
    url, work = remote
    cache = tmp_path / "cache"
    fetch(url, cache_dir=cache)
    git_dir = _cache_repo(cache, url) / "repo.git"
    new = _commit(work, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n")
    work.git.push("origin", "main")

    # A lock a second old may belong to a git someone just started: left alone; the fetch fails and says why.
    planted = _plant(git_dir, age=1)
    with pytest.raises(SourceError) as err:
        fetch(url, cache_dir=cache)
    message = str(err.value)
    assert "refs/heads/main.lock" in message and "cannot lock ref" in message, message
    assert "lock file in the clone cache" in message, message
    assert all(p.exists() for p in planted)

    # Left by a fetch whose process died (an OOM kill): old, and no fetch of ours holds the cache's flock.
    _plant(git_dir, age=60)
    t0 = time.monotonic()
    with capture_logs() as logs:
        checkout = fetch(url, cache_dir=cache)
    took = time.monotonic() - t0
    assert checkout.revision == new
    assert not any(p.exists() for p in planted)
    removed = {e["path"] for e in logs if e["event"] == "removed a stale git lock file from the clone cache"}
    assert removed == {str(p) for p in planted}, logs
    assert all(e["log_level"] == "warning" for e in logs if e["path"] in removed)
    reliability.record(
        area="Git",
        fault="stale lock files in the clone cache (refs/heads/main.lock, packed-refs.lock, index.lock, "
        "shallow.lock) left by a fetch that died",
        outcome="60 s old: removed under our flock, each removal logged (warning), fetch succeeds; 1 s old: "
        "left alone, fetch fails with git's line naming the lock",
        checked="the new commit is fetched; no lock younger than 5 s is touched",
        figures=f"{len(planted)} locks removed; fetch {took:.2f} s",
    )


def test_a_lock_of_a_live_fetch_of_ours_is_not_touched(
    tmp_path: Path, remote: tuple[str, git.Repo], reliability: Recorder
) -> None:
    url, work = remote
    cache = tmp_path / "cache"
    fetch(url, cache_dir=cache)
    repo_cache = _cache_repo(cache, url)
    new = _commit(work, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    work.git.push("origin", "main")
    result: dict[str, object] = {}

    # Another fetch of ours runs: it holds the cache's flock, and its git lock is there (old on purpose).
    with open(repo_cache / "lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        lock = repo_cache / "repo.git" / "refs" / "heads" / "main.lock"
        lock.write_text("")
        os.utime(lock, (time.time() - 60, time.time() - 60))

        def second() -> None:
            try:
                result["revision"] = fetch(url, cache_dir=cache).revision
            except SourceError as exc:  # pragma: no cover - reported by the assertion below
                result["error"] = str(exc)

        t = threading.Thread(target=second)
        t.start()
        time.sleep(1.5)
        assert t.is_alive(), result  # it waits for the flock instead of clearing a lock in use
        assert lock.exists()
        lock.unlink()  # the live fetch ends and cleans up after itself
        fcntl.flock(held, fcntl.LOCK_UN)
    t.join(30)
    assert result == {"revision": new}
    reliability.record(
        area="Git",
        fault="a git lock file held by a live fetch of ours (its flock held) while a second fetch starts",
        outcome="the second fetch waits for the flock; the lock is not touched; it then fetches",
        checked="the live fetch's lock file still exists while it runs; the second fetch gets the new commit",
        figures="waited ≥ 1.5 s on the flock",
    )


def test_git_errors_keep_the_fatal_line_and_mask_credentials(tmp_path: Path, reliability: Recorder) -> None:
    # A remote path that is not a repository: git's fatal line comes first, then 4 lines of advice.
    not_repo = tmp_path / "plain"
    not_repo.mkdir()
    url = f"file://user:s3cr3t@{not_repo}"  # credentials must never reach the message
    with pytest.raises(SourceError) as err:
        fetch(f"file://{not_repo}", cache_dir=tmp_path / "cache")
    message = str(err.value)
    assert "fatal:" in message and "does not appear to be a git repository" in message, message

    from gitops_sync.source.giterrors import stderr_tail

    stderr = (
        "stderr: 'error: cannot lock ref 'refs/heads/main': Unable to create "
        "'/c/repo.git/refs/heads/main.lock': File exists.\n\nAnother git process seems to be running in this "
        "repository, e.g.\nan editor opened by 'git commit'. Please make sure all processes\nare terminated then "
        "try again. If it still fails, a git process\nmay have crashed in this repository earlier:\nremove the "
        f"file manually to continue.\nFrom {url}\n ! a..b main -> main (unable to update local ref)'"
    )
    kept = stderr_tail(stderr)
    assert "main.lock': File exists" in kept and "s3cr3t" not in kept and "***@" in kept, kept
    reliability.record(
        area="Git",
        fault="git fails with a long explanation after its error line (not a repository; a ref lock)",
        outcome="the message keeps git's fatal:/error: line and the lock path, then the last lines",
        checked="no credential of the URL in the message",
        figures=f"{len(kept)} characters kept",
    )


def _as_nobody() -> list[str]:
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to run git as an unprivileged user"
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def test_an_unreadable_remote_is_reported_as_permission_denied(reliability: Recorder) -> None:
    # Under /tmp itself: pytest's tmp_path sits in a root-only directory the unprivileged user cannot cross.
    top = Path(tempfile.mkdtemp(prefix="gitops-sync-perm-"))
    try:
        top.chmod(0o755)
        bare = git.Repo.init(top / "remote.git", bare=True, initial_branch="main").git_dir
        cache = top / "cache"
        cache.mkdir()
        cache.chmod(0o777)
        Path(bare).chmod(0o000)  # unreadable to anybody but root: the fetch runs as nobody, like a service user
        url = f"file://{bare}"
        cmd = [*_as_nobody(), sys.executable, "-m", "gitops_sync", "render", "--repo", url, "--cache-dir", str(cache)]
        env = {"PATH": os.environ["PATH"], "HOME": str(cache), "PYTHONPATH": str(REPO_ROOT)}
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=cache, check=False)
    finally:
        (top / "remote.git").chmod(0o755)
        shutil.rmtree(top, ignore_errors=True)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "permission denied" in r.stderr and str(bare) in r.stderr, r.stderr
    assert "no Git repository" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    reliability.record(
        area="Git",
        fault="a file:// remote the fetching user may not read (chmod 000, fetched as nobody)",
        outcome="exit 2, 'permission denied reading <url>: uid 65534 may not read <path>'",
        checked="not reported as 'does not appear to be a git repository'; no traceback",
        figures="",
    )
