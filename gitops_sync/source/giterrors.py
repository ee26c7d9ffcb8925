"""Why a git command failed, in one line a user can act on: which host, and network, auth or a wrong URL.

git's stderr is long and may quote a URL with its credentials: `stderr_tail` keeps the lines that name the
cause, masked, and `explain` turns a failed fetch into a SourceError's message (the report and the daemon's
status show it next).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from gitops_sync.errors import SourceError
from gitops_sync.formatting import last_lines
from gitops_sync.source.cachelock import STALE_LOCK_AGE
from gitops_sync.source.remote import Remote, host_of, is_remote, mask_url

if TYPE_CHECKING:
    import git

_NETWORK = (
    "could not resolve host",
    "could not resolve hostname",
    "name or service not known",
    "connection refused",
    "failed to connect",
    "network is unreachable",
    "no route to host",
    "connection reset",
    "could not read from remote repository",
)
_MISSING = ("does not appear to be a git repository", "repository not found")
_AUTH = (
    "authentication failed",
    "could not read username",
    "could not read password",
    "permission denied",
    "terminal prompts disabled",
)


def spawn_git(
    argv: Sequence[str], env: dict[str, str], timeout: float, *, cwd: str | None = None, prefix: str = ""
) -> tuple[int, bytes, bytes, bool]:
    """Run a `git` (argv[0]) to its end in a session of its own: (status, stdout, stderr, timed out). Past
    `timeout` the whole process group (its ssh, git-remote-https, index-pack) is killed. A SourceError
    `prefix` + why when git cannot start. The one spawn of run_remote and safegit.run_git."""
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise SourceError(f"{prefix}the `git` command is not installed (it must be on PATH)") from None
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return proc.returncode, out, err, True


def run_remote(repo: git.Repo, timeout: float, url: str, remote: Remote, *args: str) -> str:
    """Run a git command against `url` in the repository `repo` (its whole environment from
    `remote.environment()`: credentials, or a tenant's hermetic one), translating failures into a SourceError
    naming the host; the credentials' values are masked out of whatever git said."""
    code, out, err, timed_out = spawn_git(["git", *args], remote.environment(), timeout, cwd=str(repo.git_dir))
    if timed_out:
        err += f"\nTimeout: the command timed out after {timeout:g}s".encode()
    if code != 0:
        stderr = err.decode(errors="replace")
        for secret in remote.secrets:
            stderr = stderr.replace(secret, "***")
        raise SourceError(explain(url, stderr, timeout))
    return out.decode(errors="replace").rstrip("\n")


def explain(url: str, stderr: str, timeout: float) -> str:
    """A one-line reason a user can act on: which host, and whether it is network, auth or a wrong URL."""
    masked = mask_url(url)
    host = host_of(url)
    detail = mask_url(stderr_tail(stderr)).replace(url, masked)
    low = stderr.lower()
    if "timeout: the command" in low or "timed out" in low:
        return f"cannot reach {host}: no answer within {timeout:g}s fetching {masked}"
    if ".lock': file exists" in low or ("unable to create" in low and ".lock" in low):
        return (
            f"a git lock file in the clone cache blocks fetching {masked} (another git process, or one that "
            f"died; removed automatically once older than {STALE_LOCK_AGE:g}s): {detail}"
        )
    if "does not appear to be a git repository" in low:
        denied = permission_problem(url)
        if denied:
            return f"permission denied reading {masked}: {denied}"
    if "host key verification failed" in low:
        return f"{_host_key_problem(low, host)} fetching {masked}: {detail}"
    # Status codes as words: a port or path holding the digits (`127.0.0.1:40479`) is no 404 (a flaky test
    # once a random port held them).
    if any(m in low for m in _MISSING) or re.search(r"\b404\b|repository '[^']*' not found", low):
        return f"no Git repository at {masked}: {detail}"
    if any(a in low for a in _AUTH) or re.search(r"\b40[13]\b", low):
        return f"authentication failed for {masked} (host {host}): {detail}"
    if any(n in low for n in _NETWORK):
        return f"cannot reach {host} fetching {masked}: {detail}"
    return f"git failed fetching {masked}: {detail}"


def _host_key_problem(low: str, host: str) -> str:
    """ssh refused the server's host key: changed (someone may be in between) or never known."""
    if "has changed" in low or "remote host identification" in low:
        return (
            f"host key mismatch: the SSH host key of {host} is not the one known_hosts lists (refused: the "
            "server was replaced or someone is in between; update known_hosts only if the change is expected)"
        )
    return f"unknown SSH host key: {host} is not in known_hosts (refused: host keys are always verified)"


def permission_problem(url: str) -> str:
    """For a file:// or path remote git calls "not a git repository": is it really unreadable to us?

    git runs as this process's user, so `os.access` answers what git could do. "" when readable or remote.
    """
    if url.startswith("file://"):
        path = Path(unquote(urlsplit(url).path))
    elif not is_remote(url):
        path = Path(url).expanduser()
    else:
        return ""
    uid = os.getuid()
    for p in [*reversed(path.parents), path]:
        try:
            p.stat()
        except PermissionError:
            return f"uid {uid} may not read {p}"
        except OSError:
            return ""  # missing: git's own message is right
        if p.is_dir() and not os.access(p, os.X_OK | (os.R_OK if p == path else 0)):
            return f"uid {uid} may not read {p}"
    for inner in (path / "HEAD", path / ".git" / "HEAD", path / "objects", path / ".git" / "objects"):
        if inner.exists() and not os.access(inner, os.R_OK):
            return f"uid {uid} may not read {inner}"
    return ""


def stderr_tail(text: object, lines: int = 5, key_lines: int = 6) -> str:
    """Where git says why, credentials masked: its `fatal:`/`error:` lines and any naming a lock file (up to
    `key_lines`), plus the last `lines` lines, in git's order. GitPython wraps stderr as `stderr: '...'`."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    body = str(text or "").strip()
    if body.startswith("stderr:"):
        body = body.removeprefix("stderr:").strip()
        body = body[1:-1] if len(body) > 1 and body[0] == body[-1] == "'" else body
    chosen = last_lines(body, lines, keep=_names_cause, keep_most=key_lines)
    return mask_url(" | ".join(ln.strip() for ln in chosen))


def _names_cause(line: str) -> bool:
    line = line.strip()
    return line.lower().startswith(("fatal:", "error:")) or ".lock" in line
