"""What makes the daemon look at Git again: a jittered poll, file-system events, a signed webhook.

None of them does work: each only enqueues "check the source". The jitter spreads replicas and
daemons of many clusters over the interval, so a Git server is not hit by all of them at once.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gitops_sync.errors import GitOpsError
from gitops_sync.log import get_logger

if TYPE_CHECKING:
    from gitops_sync.source.watch import Watch

log = get_logger(__name__)

WEBHOOK_SECRET_ENV = "GITOPS_SYNC_WEBHOOK_SECRET"


class Ticker:
    """Calls `fn` every `period` seconds ± `jitter` (a fraction), on a daemon thread, until `stop()`."""

    def __init__(
        self,
        name: str,
        period: float,
        fn: Callable[[], None],
        *,
        jitter: float = 0.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.period = period
        self.jitter = jitter
        self._fn = fn
        self._rand = rand
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.run, name=name, daemon=True)

    def next_delay(self) -> float:
        return max(0.0, self.period * (1 + self.jitter * (2 * self._rand() - 1)))

    @property
    def name(self) -> str:
        return self._thread.name

    def start(self) -> Ticker:
        if self.period > 0:
            self._thread.start()
        return self

    def run(self) -> None:
        """The loop, until `stop()`; the daemon runs it under its supervisor instead of `start()`."""
        while not self._stop.wait(self.next_delay()):
            try:
                self._fn()
            except Exception as exc:
                log.error("periodic trigger failed", trigger=self.name, error=type(exc).__name__)

    def stop(self) -> None:
        self._stop.set()


# -- webhook ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookResult:
    ok: bool
    status: int
    reason: str
    provider: str = ""


def verify_webhook(headers: Mapping[str, str], body: bytes, secret: bytes | None) -> WebhookResult:
    """GitHub (`X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`) or GitLab (`X-Gitlab-Token`).

    Constant-time comparisons of bytes (a non-ASCII header is a mismatch, not an error); no secret
    configured means the endpoint is off (never unauthenticated).
    """
    if not secret:
        return WebhookResult(False, 404, "webhook disabled: no secret configured (--webhook-secret-file)")
    lower = {k.lower(): v for k, v in headers.items()}
    signature = lower.get("x-hub-signature-256")
    if signature is not None:
        algo, _, digest = signature.strip().partition("=")
        if algo != "sha256" or not digest:
            return WebhookResult(False, 401, "malformed X-Hub-Signature-256 (want sha256=<hex>)", "github")
        expected = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(expected, _bytes(digest.strip().lower())):
            return WebhookResult(False, 401, "signature mismatch", "github")
        return WebhookResult(True, 202, "accepted", "github")
    token = lower.get("x-gitlab-token")
    if token is not None:
        if not hmac.compare_digest(_bytes(token), secret):
            return WebhookResult(False, 401, "token mismatch", "gitlab")
        return WebhookResult(True, 202, "accepted", "gitlab")
    return WebhookResult(False, 401, "unsigned request: X-Hub-Signature-256 or X-Gitlab-Token required")


def _bytes(header: str) -> bytes:
    """Header values arrive as latin-1 text and may hold anything; compare_digest takes non-ASCII only as bytes."""
    return header.encode("utf-8", "surrogatepass")


def load_webhook_secret(path: Path | None) -> bytes | None:
    """From `--webhook-secret-file` (trailing newline dropped) or $GITOPS_SYNC_WEBHOOK_SECRET."""
    if path is not None:
        try:
            text = path.read_text().rstrip("\r\n")
        except OSError as exc:
            raise GitOpsError(f"cannot read webhook secret file {path}: {exc.strerror or exc}") from exc
        if not text:
            raise GitOpsError(f"webhook secret file {path} is empty")
        return text.encode()
    env = os.environ.get(WEBHOOK_SECRET_ENV, "")
    return env.encode() if env else None


# -- local path ------------------------------------------------------------------------------------


def watch_local(repo: str, on_change: Callable[[], None], debounce: float) -> Watch | None:
    """Watchdog on a local repository or directory (None if remote); `stop()` ends it, `alive()` checks it."""
    from gitops_sync.source import watch as source_watch
    from gitops_sync.source.checkout import is_remote

    if is_remote(repo):
        return None
    root = Path(repo).expanduser()
    if not root.is_dir():
        log.warning("not watching the source: not a directory", repo=repo)
        return None
    return source_watch.watch(root, on_change, debounce=debounce)
