"""The daemon's two health conditions, kept apart: is the Git source good, can the API server be reached.

A cluster outage must not read as a broken repository (an alert on Git health would page the wrong
team), and a hung API server must show within seconds, not after a watch's 5-minute timeout. The
source condition is set by fetch/render/plan; the cluster condition by `ClusterProbe`, a cheap GET
/readyz with a short timeout every few seconds (faster while failing, to notice the recovery).
Both feed `/readyz`, `/status` (`daemon.conditions`) and the `*_healthy` / `*_reachable` gauges.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gitops_sync.cluster.client import Client
from gitops_sync.formatting import rfc3339
from gitops_sync.log import get_logger

log = get_logger(__name__)


class Condition:
    """ok / error / revision / since (when `ok` last changed); thread-safe. `ok` is None until first set."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._ok: bool | None = None
        self._error = ""
        self._revision = ""
        self._since = 0.0

    def set(self, ok: bool, error: str = "", revision: str | None = None) -> bool:
        """Record the latest observation; True when `ok` changed (a transition worth a log line)."""
        with self._lock:
            changed = ok != self._ok
            if changed:
                self._since = time.time()
            self._ok, self._error = ok, "" if ok else error
            if revision is not None:
                self._revision = revision
            return changed

    @property
    def state(self) -> bool | None:
        with self._lock:
            return self._ok

    @property
    def ok(self) -> bool:
        """False only once a failure was observed (unknown counts as not failed)."""
        with self._lock:
            return self._ok is not False

    @property
    def error(self) -> str:
        with self._lock:
            return self._error

    def to_dict(self, *, with_revision: bool = True) -> dict[str, Any]:
        with self._lock:
            doc: dict[str, Any] = {"ok": self._ok, "error": self._error}
            if with_revision:
                doc["revision"] = self._revision
            doc["since"] = rfc3339(self._since) if self._since else ""
            return doc


class ClusterProbe:
    """GET /readyz every `interval` s (every `failing_interval` s while failing), `client.probe_timeout` each.

    Any HTTP answer below 500 counts as reachable (a 403 on /readyz is still a server that answers);
    a 5xx (e.g. etcd down) or no answer in time counts as unreachable. `on_change(ok, error)` runs on a
    transition. `poke()` probes at once (a pass that just failed on a broken connection calls it).
    """

    def __init__(
        self,
        client: Client,
        condition: Condition,
        *,
        interval: float = 5.0,
        failing_interval: float = 1.0,
        on_change: Callable[[bool, str], None] | None = None,
    ) -> None:
        self.client = client
        self.condition = condition
        self.interval = interval
        self.failing_interval = failing_interval
        self._on_change = on_change
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.probes = 0

    def check(self) -> tuple[bool, str]:
        """One probe (`Client.probe`, the same one the client's breaker runs): (reachable, why not)."""
        self.probes += 1
        problem = self.client.probe()
        return (True, "") if problem is None else (False, f"API server {self.client.server}: {problem}")

    def probe(self) -> bool:
        ok, error = self.check()
        if self.condition.set(ok, error) and self._on_change is not None:
            self._on_change(ok, error)
        return ok

    def run(self) -> None:
        """The probe loop (a supervised thread) until `stop()`."""
        while not self._stop.is_set():
            ok = self.probe()
            self._wake.wait(self.interval if ok else self.failing_interval)
            self._wake.clear()

    def poke(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
