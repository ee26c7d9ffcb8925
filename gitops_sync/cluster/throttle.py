"""When to send a throttled request again: a 429 with `Retry-After` is the server answering, not an outage.

API Priority and Fairness (or --max-requests-inflight) answers 429; the request is sent again after the
time asked, as client-go does (`rest.checkWait`). `Client.request_status` asks `throttle_wait` after each
answer; the breaker never hears of a 429.
"""

from __future__ import annotations

import random

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
