"""A work queue with per-key de-duplication, delayed adds and exponential backoff on failure.

Events only say "look at this key again"; a burst of fifty watch events for one object must cost
one pass, and a key that keeps failing must not spin. The semantics follow client-go's workqueue:
a key is queued at most once; a key re-added while a worker holds it is queued again when the
worker calls `done`, so no change is ever lost and no key is processed twice at the same time.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

Clock = Callable[[], float]


class Backoff:
    """Exponential delays `base * 2**n` capped at `cap`, with optional jitter; `reset()` after a success."""

    def __init__(
        self, base: float, cap: float, *, jitter: float = 0.0, rand: Callable[[], float] = random.random
    ) -> None:
        self.base = base
        self.cap = cap
        self.jitter = jitter
        self._rand = rand
        self.failures = 0

    def delay_for(self, failures: int) -> float:
        """The delay after `failures` consecutive failures (1 = the first failure)."""
        raw = min(self.cap, self.base * float(2 ** max(0, min(failures - 1, 62))))
        return raw * (1 + self.jitter * (2 * self._rand() - 1)) if self.jitter else raw

    def next(self) -> float:
        self.failures += 1
        return self.delay_for(self.failures)

    def reset(self) -> None:
        self.failures = 0


class WorkQueue(Generic[K]):
    """Thread-safe; `get_batch` hands out every ready key at once so a burst becomes one pass."""

    def __init__(
        self,
        *,
        backoff_base: float = 0.05,
        backoff_cap: float = 300.0,
        clock: Clock = time.monotonic,
        on_depth: Callable[[int], None] | None = None,
    ) -> None:
        self._backoff = Backoff(backoff_base, backoff_cap)
        self._clock = clock
        self._on_depth = on_depth
        self._cond = threading.Condition()
        self._ready: list[K] = []  # FIFO of keys to hand out
        self._dirty: set[K] = set()  # keys that need processing (queued, or re-added while processing)
        self._processing: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []  # heap of (due, seq, key)
        self._due: dict[K, float] = {}  # earliest due time per delayed key
        self._seq = itertools.count()
        self._failures: dict[K, int] = {}
        self._shutdown = False

    # -- adding -----------------------------------------------------------------------------

    def add(self, key: K) -> None:
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` once `delay` seconds have passed; an earlier pending due time wins."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            due = self._clock() + delay
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            heapq.heappush(self._delayed, (due, next(self._seq), key))
            self._notify_locked()

    def add_rate_limited(self, key: K) -> float:
        """Re-queue a key that failed, after a delay doubling with each consecutive failure."""
        with self._cond:
            self._failures[key] = self._failures.get(key, 0) + 1
            delay = self._backoff.delay_for(self._failures[key])
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts from the base delay again."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    # -- taking -----------------------------------------------------------------------------

    def get_batch(self, timeout: float | None = None, *, limit: int = 0) -> list[K]:
        """Every ready key (at most `limit` when > 0), marked as processing; [] on timeout or shutdown."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._promote_locked()
                if self._ready or self._shutdown:
                    break
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return []
                if self._delayed:
                    # The clock may be injected: wake up in small steps rather than trusting its scale.
                    until_due = max(0.0, self._delayed[0][0] - self._clock())
                    wait = min(until_due, 0.05) if wait is None else min(wait, until_due, 0.05)
                self._cond.wait(wait)
            if self._shutdown and not self._ready:
                return []
            n = len(self._ready) if limit <= 0 else min(limit, len(self._ready))
            batch, self._ready = self._ready[:n], self._ready[n:]
            for key in batch:
                self._processing.add(key)
                self._dirty.discard(key)
            self._depth_changed_locked()
            return batch

    def done(self, keys: Iterable[K]) -> None:
        """The worker finished these keys; those re-added meanwhile are queued again now."""
        with self._cond:
            for key in keys:
                self._processing.discard(key)
                if key in self._dirty:
                    self._ready.append(key)
            self._notify_locked()

    # -- state ------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Depth: keys ready plus keys waiting for their delay (what the depth metric shows)."""
        with self._cond:
            return self._depth_locked()

    def pending(self) -> set[K]:
        with self._cond:
            return set(self._ready) | set(self._due)

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    @property
    def is_shutdown(self) -> bool:
        return self._shutdown

    # -- internals --------------------------------------------------------------------------

    def _add_locked(self, key: K) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._ready.append(key)
        self._notify_locked()

    def _promote_locked(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            due, _, key = heapq.heappop(self._delayed)
            if self._due.get(key) != due:
                continue  # superseded by an earlier due time, already promoted
            del self._due[key]
            self._add_locked(key)

    def _depth_locked(self) -> int:
        return len(self._ready) + len(self._due)

    def _depth_changed_locked(self) -> None:
        if self._on_depth is not None:
            self._on_depth(self._depth_locked())

    def _notify_locked(self) -> None:
        self._depth_changed_locked()
        self._cond.notify_all()
