"""Keeps the daemon's background threads alive, or makes `/healthz` say which one is not.

A thread that dies silently (the leader loop on an unexpected Lease shape, a watch loop on a bug) leaves a
daemon that looks healthy and does nothing: the Lease expires, drift stays. Every long-running loop is
therefore either run by the supervisor (`spawn`: restarted with backoff when it raises or returns early)
or registered with a liveness check (`watch`: threads owned elsewhere, restarted through a callback when
one is given). Each component's state, restarts and last error go to `/healthz`, `/status` and `/metrics`.
Error texts are the exception's type and where it was raised, never its message (it may quote a manifest).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gitops_sync.daemon.runtime.queue import Backoff
from gitops_sync.formatting import rfc3339
from gitops_sync.log import get_logger

log = get_logger(__name__)

# A component that crashed this many times in a row, each time within `steady` seconds of its start, is
# given up on: /healthz fails so the kubelet restarts the process rather than watch a crash loop.
MAX_QUICK_FAILURES = 5


def describe_crash(exc: BaseException) -> str:
    """`ValueError at yaml/constructor.py:266 in construct_yaml_int`: the type and place, not the message.

    An exception text can quote what it choked on (a Secret value, a token); type and location are enough
    to find the bug, and the full message stays out of logs, /status and Events.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__name__
    last = frames[-1]
    parts = last.filename.replace("\\", "/").split("/")
    where = "/".join(parts[-2:])
    return f"{type(exc).__name__} at {where}:{last.lineno} in {last.name}"


@dataclass
class Component:
    """One supervised loop: what /healthz and /status show about it."""

    name: str
    restart: bool
    running: bool = False
    given_up: bool = False
    restarts: int = 0
    failures: int = 0  # consecutive quick failures
    last_error: str = ""
    last_error_at: float = 0.0
    started_at: float = 0.0
    thread: threading.Thread | None = field(default=None, repr=False)
    check: Callable[[], str] | None = field(default=None, repr=False)  # watch(): "" when alive
    revive: Callable[[], None] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": "running" if self.running else ("dead" if self.given_up or not self.restart else "restarting"),
            "restarts": self.restarts,
            "lastError": self.last_error,
            "lastErrorAt": rfc3339(self.last_error_at) if self.last_error_at else "",
        }


class Supervisor:
    """`spawn` runs loops on threads it restarts; `watch` checks threads owned elsewhere; `dead()` for /healthz."""

    def __init__(
        self,
        *,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        steady: float = 60.0,
        check_interval: float = 1.0,
        on_restart: Callable[[str], None] | None = None,
    ) -> None:
        self._backoff = Backoff(backoff_base, backoff_cap)
        self._steady = steady
        self._check_interval = check_interval
        self._on_restart = on_restart
        self._lock = threading.Lock()
        self._components: dict[str, Component] = {}
        self._stopping = threading.Event()
        self._checker: threading.Thread | None = None

    # -- registering --------------------------------------------------------------------------

    def spawn(self, name: str, run: Callable[[], None], *, restart: bool = True) -> Component:
        """Run `run()` on a thread; when it raises, or returns before `stop()`, record it and run it again."""
        c = Component(name, restart=restart)
        c.thread = threading.Thread(target=self._supervise, args=(c, run), name=name, daemon=True)
        with self._lock:
            self._components[name] = c
        c.running, c.started_at = True, time.monotonic()
        c.thread.start()
        return c

    def watch(self, name: str, check: Callable[[], str], revive: Callable[[], None] | None = None) -> Component:
        """A component owned elsewhere: `check()` returns "" while it is alive, else why not.

        With `revive`, a dead component is restarted (with backoff); without, it stays dead and /healthz fails.
        """
        c = Component(
            name, restart=revive is not None, running=True, check=check, revive=revive, started_at=time.monotonic()
        )
        with self._lock:
            self._components[name] = c
            if self._checker is None:
                self._checker = threading.Thread(target=self._check_loop, name="supervisor", daemon=True)
                self._checker.start()
        return c

    # -- queries ------------------------------------------------------------------------------

    def dead(self) -> list[str]:
        """Components that are down for good (not restarting): `name: last error` each."""
        with self._lock:
            return [
                f"{c.name}: {c.last_error or 'stopped'}"
                for c in self._components.values()
                if not c.running and (c.given_up or not c.restart)
            ]

    def status(self) -> list[dict[str, Any]]:
        with self._lock:
            return [c.to_dict() for c in sorted(self._components.values(), key=lambda c: c.name)]

    def get(self, name: str) -> Component | None:
        with self._lock:
            return self._components.get(name)

    # -- stopping -----------------------------------------------------------------------------

    def stop(self) -> None:
        """From now on a loop that returns is finished, not dead; pending restarts are cancelled."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def join(self, name: str, timeout: float) -> bool:
        """Wait for a spawned component's thread; True when it has ended."""
        c = self.get(name)
        if c is None or c.thread is None:
            return True
        c.thread.join(timeout)
        return not c.thread.is_alive()

    # -- internals ----------------------------------------------------------------------------

    def _supervise(self, c: Component, run: Callable[[], None]) -> None:
        while True:
            try:
                run()
                error = "" if self._stopping.is_set() else "returned unexpectedly"
            except Exception as exc:  # the point of a supervisor: record it, then restart or give up
                error = describe_crash(exc)
            if not error:
                c.running = False
                return
            if not self._died(c, error):
                return
            if self._stopping.wait(self._backoff.delay_for(c.failures)):
                return
            self._restarted(c)

    def _died(self, c: Component, error: str) -> bool:
        """Record a death; True when the component is to be restarted."""
        now = time.monotonic()
        with self._lock:
            quick = not c.running or now - c.started_at < self._steady  # not running: a restart failed
            c.running = False
            c.failures = c.failures + 1 if quick else 1
            c.last_error, c.last_error_at = error, time.time()
            c.given_up = c.restart and c.failures >= MAX_QUICK_FAILURES
            again = c.restart and not c.given_up and not self._stopping.is_set()
        if again:
            log.error(
                "background thread died; restarting it",
                thread=c.name,
                error=error,
                retry_in=round(self._backoff.delay_for(c.failures), 2),
            )
        else:
            log.error("background thread died; /healthz reports it", thread=c.name, error=error, failures=c.failures)
        return again

    def _restarted(self, c: Component) -> None:
        with self._lock:
            c.restarts += 1
            c.running, c.started_at = True, time.monotonic()
        log.info("background thread restarted", thread=c.name, restarts=c.restarts)
        if self._on_restart is not None:
            self._on_restart(c.name)

    def _check_loop(self) -> None:
        due: dict[str, float] = {}  # name -> when a dead watched component is revived
        while not self._stopping.wait(self._check_interval):
            with self._lock:
                watched = [c for c in self._components.values() if c.check is not None]
            for c in watched:
                self._check_one(c, due)

    def _check_one(self, c: Component, due: dict[str, float]) -> None:
        assert c.check is not None
        try:
            why = c.check()
        except Exception as exc:
            why = f"liveness check failed: {describe_crash(exc)}"
        if not why:
            return
        if c.running:
            if not self._died(c, why):
                return
            due[c.name] = time.monotonic() + self._backoff.delay_for(c.failures)
        if c.revive is None or c.given_up or time.monotonic() < due.get(c.name, 0.0):
            return
        try:
            c.revive()
        except Exception as exc:
            self._died(c, f"restart failed: {describe_crash(exc)}")
            due[c.name] = time.monotonic() + self._backoff.delay_for(c.failures)
            return
        due.pop(c.name, None)
        self._restarted(c)
