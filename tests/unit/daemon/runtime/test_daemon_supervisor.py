"""The supervisor: a loop that dies is restarted with backoff, a crash loop or an unrevivable one fails /healthz."""

from __future__ import annotations

import itertools
import threading
import time

from gitops_sync.daemon.runtime.supervisor import MAX_QUICK_FAILURES, Supervisor, describe_crash
from tests.integration.daemon_support import wait_until


def test_a_loop_that_raises_is_restarted_and_its_error_recorded_without_the_message() -> None:
    runs: list[int] = []
    restarted: list[str] = []
    stop = threading.Event()

    def loop() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise ValueError("invalid literal for int(): 'hunter2-secret'")
        stop.wait()

    sup = Supervisor(backoff_base=0.01, on_restart=restarted.append)
    sup.spawn("leader", loop)
    wait_until("the loop restarted", lambda: len(runs) == 2, 5)
    c = sup.get("leader")
    assert c is not None and c.running and c.restarts == 1
    assert c.last_error.startswith("ValueError at ") and "test_daemon_supervisor.py" in c.last_error
    assert "hunter2" not in str(sup.status())
    assert restarted == ["leader"]
    assert sup.dead() == []
    sup.stop()
    stop.set()
    assert sup.join("leader", 2)


def test_a_loop_that_returns_early_counts_as_dead_but_returning_after_stop_is_normal() -> None:
    calls: list[int] = []
    sup = Supervisor(backoff_base=0.01)
    sup.spawn("ticker", lambda: calls.append(1), restart=False)
    wait_until("the loop recorded as dead", lambda: sup.dead() != [], 5)
    assert sup.dead() == ["ticker: returned unexpectedly"]
    assert sup.status()[0]["state"] == "dead"

    sup2 = Supervisor(backoff_base=0.01)
    gate = threading.Event()
    sup2.spawn("reconciler", gate.wait)
    sup2.stop()
    gate.set()
    assert sup2.join("reconciler", 2)
    assert sup2.dead() == [] and sup2.get("reconciler") is not None
    assert sup2.get("reconciler").restarts == 0  # type: ignore[union-attr]


def test_a_crash_loop_is_given_up_after_a_few_quick_failures_and_fails_healthz() -> None:
    calls: list[float] = []

    def crash() -> None:
        calls.append(time.monotonic())
        raise RuntimeError("boom")

    # Backoffs of 0.2-0.8 s, not 10-50 ms: the gaps are wall-clock times, and with the CPUs busy a thread's
    # wake-up came 35 ms late, which made a 20 ms backoff look shorter than the 10 ms one before it.
    sup = Supervisor(backoff_base=0.2, backoff_cap=0.8)
    sup.spawn("watch", crash)
    wait_until("the crash loop given up", lambda: sup.dead() != [], 15)
    assert len(calls) == MAX_QUICK_FAILURES
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[1] >= gaps[0] * 0.9, f"backoff does not shrink: {gaps}"
    assert sup.dead()[0].startswith("watch: RuntimeError at ")
    time.sleep(0.2)
    assert len(calls) == MAX_QUICK_FAILURES, "no restart after giving up"
    assert sup.join("watch", 2)


def test_a_watched_thread_is_revived_or_reported_dead() -> None:
    alive = {"events": True, "file-watch": True}
    revived: list[str] = []

    def revive() -> None:
        revived.append("file-watch")
        alive["file-watch"] = True

    sup = Supervisor(backoff_base=0.01, check_interval=0.02)
    sup.watch("events", lambda: "" if alive["events"] else "Event recorder stopped")
    sup.watch("file-watch", lambda: "" if alive["file-watch"] else "observer stopped", revive=revive)
    time.sleep(0.1)
    assert sup.dead() == []
    alive["file-watch"] = False
    wait_until("the file watch revived", lambda: revived == ["file-watch"], 5)
    assert sup.get("file-watch").restarts == 1  # type: ignore[union-attr]
    assert sup.dead() == []
    alive["events"] = False
    wait_until("the dead recorder on /healthz", lambda: sup.dead() == ["events: Event recorder stopped"], 5)
    sup.stop()
    wait_until("the checker thread ended", lambda: not any(t.name == "supervisor" for t in threading.enumerate()), 2)


def test_describe_crash_names_type_and_place_only() -> None:
    try:
        int("hunter2")
    except ValueError as exc:
        text = describe_crash(exc)
    assert text.startswith("ValueError at runtime/test_daemon_supervisor.py:")
    assert "hunter2" not in text
    assert describe_crash(KeyError("x")) == "KeyError"
