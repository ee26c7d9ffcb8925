"""Whether the API server is down, known in microseconds instead of one 30 s timeout per queued request.

After the first request that times out or cannot connect, one short `/readyz` probe decides; while it
fails, every request raises ApiUnavailableError without being sent (the engine reports those objects "not
attempted"), and a re-probe every few seconds closes the breaker again when the server is back (the daemon
recovers). `Client` holds one and asks it before every request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gitops_sync.errors import ApiUnavailableError
from gitops_sync.log import get_logger

log = get_logger(__name__)


class Breaker:
    """Remembers that the API server is down, so queued requests fail at once instead of 30 s each.

    Closed: requests go out. A request that times out or cannot connect calls `failed`, which runs one
    probe (concurrent failures share it); a failed probe opens the breaker. Open: `check` raises
    ApiUnavailableError, except for one caller every `retry_after` seconds, which probes again
    (half-open) and closes the breaker when the server answers.
    """

    def __init__(
        self, probe: Callable[[], str | None], *, retry_after: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._probe = probe  # None when healthy, else why not
        self.retry_after = retry_after
        self._clock = clock
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)  # signalled when a probe ends
        self._probing = False
        self._last_probe = float("-inf")
        self.down_since: float | None = None
        self.reason = ""
        self.trips = 0  # times the breaker opened (for metrics and tests)

    @property
    def is_down(self) -> bool:
        return self.down_since is not None

    def check(self) -> None:
        """Before a request: raise while the server is known down; the caller due for a re-probe runs it.

        While the first probe after a failure runs, callers wait for its verdict rather than send a request
        that would hang as long as the one that triggered it.
        """
        with self._done:
            waited = self._clock()
            while self._probing and self.down_since is None and self._clock() - waited < 30:
                self._done.wait(1.0)
            if self.down_since is None:
                return
            if self._probing or self._clock() - self._last_probe < self.retry_after:
                raise ApiUnavailableError(self.reason)
            self._probing = True
        self._run_probe(self.reason)
        if self.down_since is not None:
            raise ApiUnavailableError(self.reason)

    def failed(self, trigger: str) -> None:
        """After a transport failure: probe once (unless a probe runs or the breaker is already open)."""
        with self._lock:
            if self.down_since is not None or self._probing:
                return
            self._probing = True
        self._run_probe(trigger)

    def _run_probe(self, trigger: str) -> None:
        try:
            problem = self._probe()
        except Exception as exc:  # a probe that cannot run says the server is not usable
            problem = str(exc)
        with self._done:
            self._done.notify_all()
            self._probing = False
            self._last_probe = self._clock()
            if problem is None:
                if self.down_since is not None:
                    log.warning("API server reachable again", down_for=round(self._clock() - self.down_since, 1))
                self.down_since, self.reason = None, ""
            elif self.down_since is None:
                self.down_since = self._last_probe
                self.trips += 1
                self.reason = f"{trigger}; health probe: {problem}"
                log.warning("API server down: failing requests fast until it answers", reason=self.reason)
