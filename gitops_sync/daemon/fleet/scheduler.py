"""Worker slots for the fleet's sources: one pass per source at a time, at most `--workers` at once.

The dispatcher (controller.py) takes every ready key from the shared queue and `offer`s them here; a
source already running keeps its new keys until its pass ends (`finish` hands them back to be queued
again). A pass running longer than SLOW_PASS (a Git server that accepts and never answers holds a worker
for the whole git timeout, 60 s a command) stops counting against `--workers`: up to SLOW_SLOTS (or
`--workers`, if more) such slow passes run beside the ordinary ones, so sources stuck on a hung Git
server never starve the others. Passes against one remote cluster (`group`: its key, "" for the
controller's own cluster) hold at most `group_limit` slots at once, slow or not: a hung cluster's first passes
each wait out a request timeout before its breaker opens, and they must not take every slot meanwhile.
A source asked to look at one of its objects (the object's watch event: a drift, a deletion) starts before
those asked only for a Git poll or a whole pass (SOURCE, FULL): at 1,000 sources polled once a minute, a
drift otherwise waited behind the minute's polls (p95 10 s at 1,000 x 10 ConfigMaps, 0.16 s at 1,000 x 4).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from gitops_sync.daemon.reconcile.reporter import FULL, SOURCE, QueueKey
from gitops_sync.log import get_logger

log = get_logger("gitops_sync.daemon")

SLOW_PASS = 10.0
SLOW_SLOTS = 8
BACKGROUND = frozenset({SOURCE, FULL})  # a poll or a whole pass: they yield to an object's event

Run = Callable[[str, set[QueueKey]], None]
Submit = Callable[[Run, str, set[QueueKey]], object]


class Scheduler:
    """Which source runs next. Threads: the dispatcher (`offer`, `start_waiting`), the workers (`finish`,
    then `start_waiting`), the stop (`busy`, `shutdown`). Its lock guards `waiting`, `held` and `busy`."""

    def __init__(
        self,
        workers: int,
        run: Run,
        *,
        clock: Callable[[], float] = time.monotonic,
        submit: Submit | None = None,
        group: Callable[[str], str] = lambda ref: "",
    ) -> None:
        self.workers = max(workers, 1)
        self._group = group
        self.group_limit = max(1, self.workers // 2)  # slots one remote cluster's passes may hold at once
        self.pool_size = self.workers + max(self.workers, SLOW_SLOTS)
        self._run = run
        self._clock = clock
        self._pool: ThreadPoolExecutor | None = None
        if submit is None:
            self._pool = ThreadPoolExecutor(max_workers=self.pool_size, thread_name_prefix="source")
            submit = self._pool.submit
        self._submit = submit
        self._lock = threading.Lock()
        self._busy: dict[str, float] = {}  # source -> when its pass started
        self._groups: dict[str, str] = {}  # running source -> its remote cluster ("" = none)
        self._held: dict[str, set[QueueKey]] = {}  # keys of a running source, queued again when it ends
        # Sources due, until a worker is free, each in arrival order: `_urgent` has keys of events, `_waiting`
        # only BACKGROUND ones (a source moves to `_urgent` with its keys when an event's key comes).
        self._urgent: dict[str, set[QueueKey]] = {}
        self._waiting: dict[str, set[QueueKey]] = {}

    def offer(self, batch: Iterable[tuple[str, QueueKey]]) -> None:
        with self._lock:
            for ref, key in batch:
                if ref in self._urgent:
                    self._urgent[ref].add(key)
                elif key in BACKGROUND:
                    self._waiting.setdefault(ref, set()).add(key)
                else:
                    self._urgent[ref] = {key, *self._waiting.pop(ref, ())}

    @property
    def has_waiting(self) -> bool:
        with self._lock:
            return bool(self._urgent or self._waiting)

    def start_waiting(self) -> None:
        """Start the sources due, those asked by events first, each oldest first, while fewer than `workers`
        passes run that are not slow."""
        with self._lock:
            now = self._clock()
            running = sum(1 for t in self._busy.values() if now - t < SLOW_PASS)
            per_group: dict[str, int] = {}
            for g in self._groups.values():
                per_group[g] = per_group.get(g, 0) + 1
            for due in (self._urgent, self._waiting):
                for ref in list(due):
                    if ref in self._busy:
                        self._held.setdefault(ref, set()).update(due.pop(ref))
                        continue
                    if running >= self.workers or len(self._busy) >= self.pool_size:
                        return
                    group = self._group(ref)
                    if group and per_group.get(group, 0) >= self.group_limit:
                        continue  # its cluster holds its share of the slots: it waits, the others go on
                    if not self._start(ref, due.pop(ref), group, now):
                        return
                    if group:
                        per_group[group] = per_group.get(group, 0) + 1
                    running += 1

    def _start(self, ref: str, keys: set[QueueKey], group: str, now: float) -> bool:
        """Hand `ref`'s pass to a worker (the lock held); False when the pool is shutting down."""
        self._busy[ref] = now
        if group:
            self._groups[ref] = group
        try:
            self._submit(self._run, ref, keys)
        except RuntimeError:  # shutting down
            self._busy.pop(ref, None)
            self._groups.pop(ref, None)
            return False
        return True

    def finish(self, ref: str) -> set[QueueKey]:
        """The pass of `ref` ended: the keys that came meanwhile (the caller queues them again)."""
        with self._lock:
            self._busy.pop(ref, None)
            self._groups.pop(ref, None)
            return self._held.pop(ref, set())

    def busy(self) -> int:
        with self._lock:
            return len(self._busy)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def drain(self, grace: float) -> None:
        """Wait up to `grace` seconds for the passes in flight."""
        deadline = time.monotonic() + grace
        while self.busy() and time.monotonic() < deadline:
            time.sleep(0.05)


__all__ = ["BACKGROUND", "SLOW_PASS", "SLOW_SLOTS", "Scheduler"]
