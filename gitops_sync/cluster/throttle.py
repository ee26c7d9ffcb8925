"""When to send a throttled request again: a 429 with `Retry-After` is the server answering, not an outage;
and how many requests a client sends per second at most (`RateLimit`, client-go's QPS and burst).

API Priority and Fairness (or --max-requests-inflight) answers 429; the request is sent again after the
time asked, as client-go does (`rest.checkWait`). `Client.request_status` asks `throttle_wait` after each
answer; the breaker never hears of a 429.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from gitops_sync.errors import ApiUnavailableError

MAX_RETRIES = 10  # of a throttled request: client-go's default (rest.NewRESTClient: maxRetries 10)


def throttle_wait(status: int, retry_after: str | None, retries: int, max_retries: int) -> float | None:
    """Seconds to wait before sending a throttled request again, None when it is not retried.

    As client-go: only a 429 with an integer `Retry-After` (seconds, as the API server sends it; an
    HTTP date or junk is not honoured), at most `max_retries` times. Up to half the time asked more, at
    random (up to 0.1 s for `Retry-After: 0`), so the requests throttled together do not all come back
    in the same instant. A 5xx with Retry-After is not retried here: unlike a 429 it may have been
    processed (a 504 ServerTimeout carries one), and the engine reports those per object.
    """
    if status != 429 or retry_after is None or retries >= max_retries:
        return None
    try:
        seconds = int(retry_after.strip())
    except ValueError:
        return None
    if seconds < 0:
        return None
    return seconds + random.uniform(0, max(seconds, 0.2) / 2)


class RateLimit:
    """A token bucket: `qps` requests a second on average, `burst` at once (client-go's flowcontrol).

    One per API server (cluster/connection.py): a cluster's own requests wait for its own tokens, never for
    another cluster's. `take` waits for a token; a wait past the client's deadline is not waited out."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("a rate limit needs qps > 0 and burst >= 1")
        self.qps, self.burst = qps, burst
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._at = clock()
        self.waited = 0.0  # seconds requests spent waiting for a token (for metrics and tests)

    def take(self, deadline: float | None = None) -> None:
        """Take a token, waiting for it when the bucket is empty; ApiUnavailableError (not sent) when the
        wait would end past `deadline` (a monotonic time)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1.0  # reserved now: the callers after this one wait behind it
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
            if deadline is not None and wait > 0 and now + wait > deadline:
                self._tokens += 1.0
                raise ApiUnavailableError(f"the client-side rate limit ({self.qps:g}/s) would wait past the deadline")
            self.waited += wait
        if wait > 0:
            self._sleep(wait)
