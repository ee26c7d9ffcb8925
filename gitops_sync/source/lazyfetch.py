"""Does this machine's git start a lazy fetch when it serves a `file://` fetch? Asked once, by the fleet, when
`--allow-local-repository` lets tenants name local repositories.

A `file://` URL is served by an upload-pack running in that repository, and git strips our GIT_CONFIG_* there
(safegit.py). If the repository is a partial clone, a lazy fetch there runs its promisor remote's `uploadpack`
or `core.sshCommand` with the controller's rights. Every fetch sets GIT_NO_LAZY_FETCH=1 (remote.py), and the
upload-pack fix of git 2.39.4/2.40.2/…/2.45.1 honours it; an older upload-pack lazy-fetches whatever we set.
Distributions backport that fix without a new version number, so the version cannot tell: the probe asks git
itself. It fetches, through `checkout.fetch` exactly as a source is fetched, a partial clone whose promisor
remote's `uploadpack` would leave a marker. No marker: safe. The fleet's start (daemon/command.py) refuses
`--allow-local-repository` otherwise.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from gitops_sync.errors import SourceError
from gitops_sync.source.checkout import fetch
from gitops_sync.source.safegit import run_git

_WHO = ("-c", "user.name=gitops-sync", "-c", "user.email=probe@gitops-sync.invalid")


def serving_lazy_fetches(timeout: float = 30.0) -> bool:
    """True when a `file://` fetch of a partial clone made its promisor remote's command run (unsafe git).
    SourceError when the probe's own repositories cannot be made (git's message named)."""
    with tempfile.TemporaryDirectory(prefix="gitops-sync-lazyfetch-") as tmp:
        top, marker = _partial_clone(Path(tmp), timeout)
        # A safe git fails here: the blobs are not in the partial clone, and nothing fetches them.
        with contextlib.suppress(SourceError):
            fetch(f"file://{top}", "main", cache_dir=Path(tmp) / "cache", timeout=timeout)
        return marker.exists()


def _partial_clone(tmp: Path, timeout: float) -> tuple[Path, Path]:
    origin, top, marker, script = tmp / "origin", tmp / "partial", tmp / "ran", tmp / "uploadpack"
    _git(timeout, "init", "-q", "-b", "main", str(origin))
    (origin / "probe.yaml").write_text("probe: true\n")
    _git(timeout, "add", "probe.yaml", where=origin)
    _git(timeout, "commit", "-q", "-m", "probe", where=origin, pre=_WHO)
    _git(timeout, "config", "uploadpack.allowFilter", "true", where=origin)
    _git(timeout, "clone", "-q", "--filter=blob:none", "--no-checkout", f"file://{origin}", str(top))
    script.write_text(f'#!/bin/sh\ntouch "{marker}"\nexit 1\n')
    script.chmod(0o755)
    _git(timeout, "config", "remote.origin.uploadpack", str(script), where=top)
    _git(timeout, "config", "protocol.allow", "always", where=top)
    return top, marker


def _git(timeout: float, command: str, *args: str, where: Path | None = None, pre: tuple[str, ...] = ()) -> None:
    argv = ["git", *(("-C", str(where)) if where else ()), *pre, command, *args]
    run_git(argv, dict(os.environ), timeout, prefix=f"cannot probe git's lazy fetch (git {command}): ")


__all__ = ["serving_lazy_fetches"]
