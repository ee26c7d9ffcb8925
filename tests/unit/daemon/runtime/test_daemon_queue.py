"""Work queue: per-key de-duplication, no concurrent processing of a key, delayed adds, backoff."""

from __future__ import annotations

import threading
import time

from gitops_sync.daemon.runtime.queue import Backoff, WorkQueue
from tests.unit.fakes import FakeClock


def test_a_burst_of_adds_for_one_key_is_one_item() -> None:
    q: WorkQueue[str] = WorkQueue()
    for _ in range(50):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert q.get_batch(timeout=0) == ["a", "b"]
    assert q.get_batch(timeout=0) == []


def test_a_key_re_added_while_processing_comes_back_only_after_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get_batch(timeout=0) == ["a"]
    q.add("a")  # a new event while the worker holds the key
    q.add("a")
    assert q.get_batch(timeout=0) == [], "never handed out twice at the same time"
    q.done(["a"])
    assert q.get_batch(timeout=0) == ["a"]
    q.done(["a"])
    assert q.get_batch(timeout=0) == []


def test_done_without_re_add_does_not_requeue() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.get_batch(timeout=0)
    q.done(["a"])
    assert len(q) == 0


def test_rate_limited_delays_double_per_failure_up_to_the_cap_and_reset_on_forget() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(backoff_base=0.1, backoff_cap=1.0, clock=clock)
    delays = [q.add_rate_limited("k") for _ in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    q.forget("k")
    assert q.failures("k") == 0
    assert q.add_rate_limited("k") == 0.1


def test_delayed_key_is_not_ready_before_its_time_and_dedupes_with_a_direct_add() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_after("k", 5.0)
    assert len(q) == 1
    assert q.get_batch(timeout=0) == []
    clock.advance(4.9)
    assert q.get_batch(timeout=0) == []
    clock.advance(0.2)
    assert q.get_batch(timeout=0) == ["k"]
    q.done(["k"])
    # an earlier due time wins over a later one
    q.add_after("k", 10.0)
    q.add_after("k", 1.0)
    clock.advance(1.0)
    assert q.get_batch(timeout=0) == ["k"]


def test_depth_callback_reports_queue_depth() -> None:
    depths: list[int] = []
    q: WorkQueue[str] = WorkQueue(on_depth=depths.append)
    q.add("a")
    q.add("b")
    q.get_batch(timeout=0)
    assert depths[:2] == [1, 2] and depths[-1] == 0


def test_get_batch_blocks_until_an_add_and_shutdown_releases_waiters() -> None:
    q: WorkQueue[str] = WorkQueue()
    got: list[list[str]] = []
    t = threading.Thread(target=lambda: got.append(q.get_batch(timeout=5)))
    t.start()
    time.sleep(0.05)
    q.add("x")
    t.join(2)
    assert got == [["x"]]
    t2 = threading.Thread(target=lambda: got.append(q.get_batch(timeout=5)))
    t2.start()
    q.shutdown()
    t2.join(2)
    assert not t2.is_alive() and got[-1] == []
    q.add("y")
    assert len(q) == 0, "adds after shutdown are ignored"


def test_real_time_delay_is_honoured() -> None:
    q: WorkQueue[str] = WorkQueue()
    t0 = time.monotonic()
    q.add_after("k", 0.2)
    assert q.get_batch(timeout=2) == ["k"]
    assert 0.15 <= time.monotonic() - t0 < 1.0


def test_backoff_with_jitter_stays_within_bounds() -> None:
    b = Backoff(1.0, 8.0, jitter=0.5, rand=lambda: 1.0)
    assert b.next() == 1.5
    b2 = Backoff(1.0, 8.0, jitter=0.5, rand=lambda: 0.0)
    assert [b2.next() for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    b2.reset()
    assert b2.failures == 0


def test_a_key_failing_every_pass_backs_off_to_the_cap_and_only_forget_resets_it() -> None:
    """The daemon's retry of a failing full pass: a minute costs a dozen passes, not a thousand."""
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(backoff_base=0.05, backoff_cap=300.0, clock=clock)
    q.add("full")
    passes = 0
    t0 = clock.now
    while clock.now - t0 < 60:
        batch = q.get_batch(timeout=0)
        if not batch:
            clock.now = min(q._due.values())  # jump the fake clock to the next due key
            continue
        passes += 1
        q.done(batch)
        q.add_rate_limited("full")  # the pass failed
    assert q.failures("full") == passes
    assert passes <= 12, f"{passes} passes in a minute"
    assert [q.add_rate_limited("full") for _ in range(3)][-1] == 300.0
    q.add("full")  # an event or the resync timer: handled at once, and no reset of the count
    assert q.failures("full") == passes + 3
    q.forget("full")  # a clean pass
    assert q.add_rate_limited("full") == 0.05


def test_backoff_delays_cap_at_max_backoff() -> None:
    b = Backoff(0.05, 300.0)
    delays = [b.next() for _ in range(20)]
    assert delays[:4] == [0.05, 0.1, 0.2, 0.4]
    assert max(delays) == 300.0 and delays[-1] == 300.0
    assert sum(1 for d in delays if d < 20) <= 9


def test_backoff_is_counted_per_key_and_a_success_forgives_only_its_own_key() -> None:
    """One source failing must not slow another's first retry, nor another's success reset its count."""
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(backoff_base=1.0, backoff_cap=60.0, clock=clock)
    assert [q.add_rate_limited("broken") for _ in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert q.add_rate_limited("flaky") == 1.0, "its own first failure: the base delay"
    q.forget("flaky")  # flaky's next pass succeeded
    assert q.failures("broken") == 4 and q.add_rate_limited("broken") == 16.0
    assert q.failures("flaky") == 0 and q.add_rate_limited("flaky") == 1.0


def test_a_burst_of_failures_of_one_key_is_one_retry_at_the_earliest_delay() -> None:
    """Every object of a pass failing requeues the same key: the later due times fold into the first."""
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(backoff_base=1.0, backoff_cap=60.0, clock=clock)
    assert [q.add_rate_limited("full") for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert len(q) == 1
    clock.advance(1.0)
    assert q.get_batch(timeout=0) == ["full"]
    q.done(["full"])
    clock.advance(60.0)
    assert q.get_batch(timeout=0) == [] and len(q) == 0, "no second retry from the folded delays"


def test_a_delayed_add_falling_due_is_an_ordinary_add_merged_and_held_while_a_worker_has_the_key() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add("k")  # an event queued the key ...
    q.add_after("k", 1.0)  # ... and a retry falls due before a worker took it
    clock.advance(1.0)
    assert q.get_batch(timeout=0) == ["k"], "one item, not two"
    q.add_after("k", 1.0)  # a worker holds k; another retry falls due meanwhile
    clock.advance(1.0)
    assert q.get_batch(timeout=0) == [], "never handed out while a worker holds it"
    q.done(["k"])
    assert q.get_batch(timeout=0) == ["k"], "nor lost: handed out once the worker is done"
    q.done(["k"])
    assert len(q) == 0


def test_a_key_failing_for_days_stays_at_the_cap() -> None:
    """2**n overflows a float past n = 1023: the count grows on, the delay stays at the cap."""
    q: WorkQueue[str] = WorkQueue(backoff_base=0.05, backoff_cap=300.0, clock=FakeClock())
    delays = [q.add_rate_limited("k") for _ in range(2000)]
    assert delays[-1] == 300.0 and q.failures("k") == 2000
