"""Starts and stops a controller's components in declared groups, and settles what a handling asked.

As controller-runtime's runnable groups: a component is registered in a `Group`; `start` runs the groups
in their declared order and `stop` the same components in exactly the reverse order, in one place. So the
order is data a reader can see (`plan()`), not thirteen hand-ordered lines repeated per controller:
triggers stop putting keys in before the workers drain, the workers drain before the Leases are given
up, the caches and Events stop after the work, HTTP after that, and the client pools close last.

`reconcile_handler` is the one place a controller's worker hands a batch of keys to a handling and
settles the queue from what it returned (controller-runtime's reconcileHandler): forget, retry with
backoff, look again later, or, when the handling raised, retry every key with backoff. Knows nothing of
Git or sources; `single/` and `fleet/` both run on it.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from gitops_sync.daemon.runtime.supervisor import Supervisor, describe_crash
from gitops_sync.log import get_logger

log = get_logger("gitops_sync.daemon")

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)


class Group(enum.IntEnum):
    """Start order, lowest first; stop runs the reverse."""

    CLIENTS = 0  # API client pools: closed last
    SERVING = 1  # HTTP: probes answer from the start and until everything else stopped
    EVENTS = 2  # the Event recorder: flushed once the work stopped
    CACHES = 3  # watch caches
    ELECTION = 4  # the leader Lease, the shard Leases: given up once no pass runs
    WORKERS = 5  # take keys from the queue: drained (or abandoned after the grace period)
    TRIGGERS = 6  # put keys into the queue: pollers, tickers, probes, the watch of the controller's objects
    SUPERVISION = 7  # the supervisor's liveness checks: it stops restarting anything first


@dataclass(frozen=True)
class Runnable:
    group: Group
    name: str
    start: Callable[[], object] | None = None
    stop: Callable[[], object] | None = None


class Manager:
    """The components of one controller process; `start()` once, `stop()` from any thread (idempotent).

    Threads: `start` runs on the caller's; `stop` on a signal handler's or a test's. `stopping` is read by
    every thread (a plain flag: set once, never cleared)."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self._runnables: list[Runnable] = []
        self._stopping = False
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    def add(
        self,
        group: Group,
        name: str,
        *,
        start: Callable[[], object] | None = None,
        stop: Callable[[], object] | None = None,
    ) -> None:
        self._runnables.append(Runnable(group, name, start, stop))

    def spawn(
        self, group: Group, name: str, run: Callable[[], None], *, stop: Callable[[], None] | None = None
    ) -> None:
        """A loop run by the supervisor (restarted when it dies); `stop` ends it."""
        self.add(group, name, start=lambda: self._spawn(name, run), stop=stop)

    def _spawn(self, name: str, run: Callable[[], None]) -> None:
        self.supervisor.spawn(name, run)

    def plan(self) -> list[tuple[str, str]]:
        """(group, name) in start order: what `start` does, and reversed what `stop` does."""
        return [(r.group.name.lower(), r.name) for r in self._ordered()]

    def _ordered(self) -> list[Runnable]:
        return sorted(self._runnables, key=lambda r: r.group)  # stable: registration order within a group

    def start(self) -> None:
        for r in self._ordered():
            if r.start is not None:
                r.start()

    def stop(self) -> bool:
        """Stop every component, last started first; False when already stopping (nothing done)."""
        with self._stop_lock:
            if self._stopping:
                return False
            self._stopping = True
        for r in reversed(self._ordered()):
            if r.stop is None:
                continue
            try:
                r.stop()
            except Exception as exc:  # one component failing to stop must not keep the others running
                log.error("component failed to stop", component=r.name, error=describe_crash(exc))
        self._stopped.set()
        return True

    @property
    def stopping(self) -> bool:
        return self._stopping

    def wait(self, timeout: float | None = None) -> bool:
        """True once `stop` finished."""
        return self._stopped.wait(timeout)


class Op(enum.Enum):
    ADD = "add"
    AFTER = "after"  # add once `delay` seconds passed
    RATE_LIMITED = "rate_limited"  # add after the key's backoff, which grows with each call until forgotten
    FORGET = "forget"  # the key succeeded: its next failure starts from the base delay


@dataclass(frozen=True)
class Request(Generic[K]):
    op: Op
    key: K
    delay: float = 0.0


class Queue(Protocol[K_contra]):
    """The part of runtime/queue.py's WorkQueue that settling uses."""

    def add(self, key: K_contra) -> None: ...

    def add_after(self, key: K_contra, delay: float) -> None: ...

    def add_rate_limited(self, key: K_contra) -> float: ...

    def forget(self, key: K_contra) -> None: ...

    def failures(self, key: K_contra) -> int: ...


class Requests(Generic[K]):
    """A queue that records instead of queueing: what one handling asks, settled after it returns.

    `add_rate_limited` answers the delay the queue will use (`delay_for(failures)`: the queue's backoff)
    and `failures` counts what was recorded, so log lines say what will happen. One handling at a time
    per recorder (a source's passes never overlap); the lock only keeps `take` consistent."""

    def __init__(self, failures: Callable[[K], int], delay_for: Callable[[int], float]) -> None:
        self._failures = failures
        self._delay_for = delay_for
        self._lock = threading.Lock()
        self._recorded: list[Request[K]] = []
        self._counts: dict[K, int] = {}

    def add(self, key: K) -> None:
        self._record(Request(Op.ADD, key))

    def add_after(self, key: K, delay: float) -> None:
        self._record(Request(Op.AFTER, key, delay))

    def add_rate_limited(self, key: K) -> float:
        n = self.failures(key) + 1
        delay = self._delay_for(n)
        with self._lock:
            self._counts[key] = n
            self._recorded.append(Request(Op.RATE_LIMITED, key, delay))
        return delay

    def forget(self, key: K) -> None:
        with self._lock:
            self._counts[key] = 0
            self._recorded.append(Request(Op.FORGET, key))

    def failures(self, key: K) -> int:
        with self._lock:
            if key in self._counts:
                return self._counts[key]
        return self._failures(key)

    def take(self) -> tuple[Request[K], ...]:
        with self._lock:
            out = tuple(self._recorded)
            self._recorded, self._counts = [], {}
        return out

    def _record(self, request: Request[K]) -> None:
        with self._lock:
            self._recorded.append(request)


def settle(queue: Queue[K], requests: Iterable[Request[K]]) -> None:
    """Apply what a handling asked, in the order it asked."""
    for r in requests:
        if r.op is Op.ADD:
            queue.add(r.key)
        elif r.op is Op.AFTER:
            queue.add_after(r.key, r.delay)
        elif r.op is Op.RATE_LIMITED:
            queue.add_rate_limited(r.key)
        else:
            queue.forget(r.key)


def reconcile_handler(
    queue: Queue[K],
    keys: Iterable[K],
    handle: Callable[[], Iterable[Request[K]]],
    **log_fields: str,
) -> bool:
    """Run one handling of `keys` and settle the queue: what it asked, or (it raised) a retry of every key
    with backoff, the worker kept alive. False when it raised."""
    try:
        requests = handle()
    except Exception as exc:
        log.error("reconcile failed unexpectedly", error=describe_crash(exc), **log_fields)
        for key in keys:
            queue.add_rate_limited(key)
        return False
    settle(queue, requests)
    return True


__all__ = ["Group", "Manager", "Op", "Queue", "Request", "Requests", "Runnable", "reconcile_handler", "settle"]
