"""Leader election state machine: injectable clock and an in-memory Lease store with optimistic concurrency.

The real Lease API is exercised by tests/integration/test_daemon_election.py.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from gitops_sync.cluster.lease import LeaderConfig, LeaderElector, fence_clock, lease_name
from gitops_sync.errors import ClusterError, ConflictError
from tests.unit.fakes import FakeClock


class MemoryLeases:
    """One Lease; updates must carry the resourceVersion they read (like the API server)."""

    where = "Lease test/lease"

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.down = False
        self.writes = 0

    def _check(self) -> None:
        if self.down:
            raise ClusterError("API server unreachable")

    def get(self) -> dict[str, Any] | None:
        self._check()
        return copy.deepcopy(self.lease)

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        self._check()
        if self.lease is not None:
            raise ConflictError(409, "AlreadyExists", "exists")
        return self._store(lease)

    def update(self, lease: dict[str, Any]) -> dict[str, Any]:
        self._check()
        assert self.lease is not None
        if (lease.get("metadata") or {}).get("resourceVersion") != str(self.rv):
            raise ConflictError(409, "Conflict", "the object has been modified")
        return self._store(lease)

    def _store(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.writes += 1
        self.lease = copy.deepcopy(lease)
        self.lease.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.lease)

    @property
    def holder(self) -> str:
        return str(((self.lease or {}).get("spec") or {}).get("holderIdentity") or "")


CFG = LeaderConfig(lease_duration=15, renew_deadline=10, retry_period=2)


def pair(store: MemoryLeases) -> tuple[LeaderElector, LeaderElector, FakeClock, FakeClock]:
    # the two replicas' clocks do not agree: only durations on each own clock matter
    ca, cb = FakeClock(), FakeClock(5000.0)
    a = LeaderElector(store, "a", CFG, clock=ca, wall=ca.wall)
    b = LeaderElector(store, "b", CFG, clock=cb, wall=cb.wall)
    return a, b, ca, cb


def advance(seconds: float, *clocks: FakeClock) -> None:
    for c in clocks:
        c.advance(seconds)


def test_first_candidate_creates_the_lease_and_the_other_follows() -> None:
    store = MemoryLeases()
    a, b, ca, cb = pair(store)
    assert a.step() and a.is_leader and a.can_write()
    assert not b.step() and not b.is_leader and not b.can_write()
    assert b.holder == "a"
    spec = store.lease["spec"]  # type: ignore[index]
    assert spec["leaseDurationSeconds"] == 15 and spec["renewTime"].endswith("Z") and "." in spec["renewTime"]
    # A keeps renewing: B never takes over, however long it waits
    for _ in range(20):
        advance(2, ca, cb)
        assert a.step()
        assert not b.step()
    assert store.holder == "a"


def test_follower_takes_over_only_after_the_lease_duration_on_its_own_clock() -> None:
    store = MemoryLeases()
    a, b, _ca, cb = pair(store)
    a.step()
    b.step()  # B observes A's record now
    advance(14, cb)  # A died: no more renewals
    assert not b.step(), "14 s < lease duration"
    advance(1.5, cb)
    assert b.step() and b.is_leader and store.holder == "b"
    assert store.lease["spec"]["leaseTransitions"] == 1  # type: ignore[index]


def test_leader_stops_writing_at_the_renew_deadline_before_anyone_may_take_over() -> None:
    started: list[str] = []
    stopped: list[str] = []
    store = MemoryLeases()
    ca = FakeClock()
    a = LeaderElector(
        store, "a", CFG, clock=ca, on_started=lambda: started.append("a"), on_stopped=lambda: stopped.append("a")
    )
    assert a.step() and started == ["a"]
    store.down = True  # A cannot renew
    advance(9.9, ca)
    assert a.can_write()
    assert a.step(), "still leading before the renew deadline"
    advance(0.2, ca)
    assert not a.can_write(), "fenced at the renew deadline even before the loop notices"
    assert not a.step() and not a.is_leader and stopped == ["a"]


def test_racing_candidates_on_an_expired_lease_cannot_both_win() -> None:
    store = MemoryLeases()
    old = LeaderElector(store, "old", CFG, clock=FakeClock())
    old.step()
    a, b, ca, cb = pair(store)
    a.step()
    b.step()
    advance(16, ca, cb)
    # both read the same expired record; the update of the second carries a stale resourceVersion
    real_get = store.get
    snapshot = real_get()
    store.get = lambda: copy.deepcopy(snapshot)  # type: ignore[method-assign]
    results = [a.step(), b.step()]
    store.get = real_get  # type: ignore[method-assign]
    assert results == [True, False]
    assert store.holder == "a"


def test_release_empties_the_holder_so_the_follower_takes_over_at_once() -> None:
    store = MemoryLeases()
    a, b, _ca, _cb = pair(store)
    a.step()
    b.step()
    assert a.release() and not a.is_leader and not a.can_write()
    assert store.holder == ""
    assert b.step() and store.holder == "b"
    assert not a.release(), "only the holder releases"


def test_a_leader_that_sees_another_holder_steps_down_at_once() -> None:
    store = MemoryLeases()
    ca = FakeClock()
    stopped: list[str] = []
    a = LeaderElector(store, "a", CFG, clock=ca, on_stopped=lambda: stopped.append("a"))
    assert a.step()
    # someone (a replica with a badly skewed view, or an operator) wrote another holder into the Lease
    taken = store.get()
    assert taken is not None
    taken["spec"]["holderIdentity"] = "intruder"
    store.update(taken)
    advance(2, ca)
    assert not a.step() and not a.is_leader and not a.can_write() and stopped == ["a"]


def test_unreachable_store_never_raises_and_a_follower_stays_follower() -> None:
    store = MemoryLeases()
    store.down = True
    a = LeaderElector(store, "a", CFG, clock=FakeClock())
    assert a.step() is False and not a.is_leader


def test_config_must_order_retry_renew_duration() -> None:
    with pytest.raises(ValueError):
        LeaderConfig(lease_duration=10, renew_deadline=10, retry_period=2)


def test_lease_name_is_derived_from_the_inventory_name_and_dns_safe() -> None:
    assert lease_name("gitops-sync-apps") == "gitops-sync-apps-lease"
    assert len(lease_name("x" * 63)) <= 63


def test_an_observer_sees_a_lease_vacant_once_its_holder_stopped_renewing_for_its_duration() -> None:
    clock, store = FakeClock(), MemoryLeases()
    cfg = LeaderConfig(lease_duration=15, renew_deadline=10, retry_period=2)
    holder = LeaderElector(store, "a", cfg, clock=clock)
    observer = LeaderElector(store, "b", cfg, clock=clock)
    assert not observer.vacant()  # never observed: unknown, not vacant
    observer.look()
    assert observer.vacant() and observer.error == ""  # no Lease yet: nobody holds it
    assert holder.step()
    observer.look()
    assert not observer.vacant() and observer.holder == "a"
    clock.advance(14)
    observer.look()  # the same record: the clock runs from when it was first seen
    assert not observer.vacant()
    clock.advance(1)
    assert observer.vacant() and store.writes == 1  # observing never writes
    store.down = True
    observer.look()
    assert "unreachable" in observer.error


def test_the_fence_is_a_deadline_from_when_the_renewal_started_not_when_it_answered() -> None:
    """A renewal that takes 3 s to answer buys renew_deadline from its start: the follower's lease_duration
    runs from a moment no earlier than that, so the margin between the two is never eaten by a slow PUT."""
    store = MemoryLeases()
    ca = FakeClock()
    a = LeaderElector(store, "a", CFG, clock=ca)
    real_update = store.update

    def slow_update(lease: dict[str, Any]) -> dict[str, Any]:
        advance(3, ca)
        return real_update(lease)

    assert a.step()
    started = ca.now
    store.update = slow_update  # type: ignore[method-assign]
    assert a.step()
    assert a.write_deadline == started + CFG.renew_deadline
    advance(CFG.renew_deadline - 3 - 0.01, ca)
    assert a.can_write()
    advance(0.02, ca)
    assert not a.can_write(), "closed renew_deadline after the renewal started, although it answered 3 s later"


def test_the_fence_is_closed_the_moment_leadership_ends_and_is_asked_without_the_lock() -> None:
    store = MemoryLeases()
    a = LeaderElector(store, "a", CFG, clock=FakeClock())
    assert a.write_deadline == float("-inf") and not a.can_write()
    assert a.step() and a.can_write()
    with a._lock:  # the last check before a socket write never waits on the elector
        assert a.can_write()
    assert a.release() and a.write_deadline == float("-inf") and not a.can_write()


def test_the_fence_clock_keeps_counting_through_a_suspend_where_the_system_has_such_a_clock() -> None:
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    before = time.clock_gettime(boottime) if boottime is not None else time.monotonic()
    now = fence_clock()
    after = time.clock_gettime(boottime) if boottime is not None else time.monotonic()
    assert before <= now <= after
