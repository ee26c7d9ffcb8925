"""The lock that lets an `alone` reliability test run with no other test beside it (tests/reliability/alone.py).

Each Lock here stands for one pytest-xdist worker (flock holds per open file, so threads of one process
contend as processes do)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.reliability.alone import Lock


def _in_thread(action: Callable[[], None]) -> threading.Event:
    done = threading.Event()

    def run() -> None:
        action()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


def test_an_alone_test_waits_for_the_tests_in_flight_and_no_test_starts_meanwhile(tmp_path: Path) -> None:
    running, alone, later = Lock(tmp_path), Lock(tmp_path), Lock(tmp_path)
    running.acquire(exclusive=False)
    other = Lock(tmp_path)
    other.acquire(exclusive=False)  # tests share the lock: both run
    other.release()
    alone_in = _in_thread(lambda: alone.acquire(exclusive=True))
    assert not alone_in.wait(0.3), "an alone test started beside a running one"
    time.sleep(0.1)  # it waits at the main lock, holding the gate
    later_in = _in_thread(lambda: later.acquire(exclusive=False))
    assert not later_in.wait(0.3), "a test started while an alone one waited: it would wait for ever"
    running.release()
    assert alone_in.wait(5)
    assert not later_in.wait(0.3), "a test started beside the alone one"
    alone.release()
    assert later_in.wait(5)
    later.release()


def test_consecutive_alone_tests_keep_the_lock(tmp_path: Path) -> None:
    alone, other = Lock(tmp_path), Lock(tmp_path)
    alone.acquire(exclusive=True)
    held = alone._held
    alone.acquire(exclusive=True)
    assert alone._held is held, "released and taken again: another test could have slipped in between"
    other_in = _in_thread(lambda: other.acquire(exclusive=False))
    assert not other_in.wait(0.3)
    alone.acquire(exclusive=False)  # the next test is an ordinary one: shared now
    assert other_in.wait(5)
    alone.release()
    other.release()
