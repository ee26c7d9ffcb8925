"""`SourceLock`: a `sync`'s hold on its source's Lease, taken by the first write (injected clock, in-memory Lease).

The real Lease, a daemon holding it and two real runs are exercised by tests/reliability/test_concurrent_runs.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from gitops_sync.cluster.lease import LeaderElector, LeaseChanged, SourceLock
from gitops_sync.errors import ClusterError, ForbiddenError, LeaseError, NotFoundError
from tests.unit.cluster.test_lease import CFG, MemoryLeases
from tests.unit.fakes import FakeClock

OWN = "/apis/coordination.k8s.io/v1/namespaces/test/leases/lease"
OBJECT = "/api/v1/namespaces/team/configmaps/a"


def lock(store: MemoryLeases, clock: FakeClock, *, timeout: float = 60) -> SourceLock:
    """The lock's waits are `clock.sleep`: they move the fake time (and run what `clock.after` scheduled)."""
    elector = LeaderElector(store, "cli", CFG, clock=clock, wall=clock.wall)
    return SourceLock(elector, timeout=timeout, exempt=lambda path: path == OWN, clock=clock, sleep=clock.sleep)


def other(store: MemoryLeases) -> LeaderElector:
    """Another run (or the daemon) of the same source."""
    clock = FakeClock()
    return LeaderElector(store, "pipeline-b", CFG, clock=clock, wall=clock.wall)


def test_a_free_lease_is_taken_by_the_first_write_and_released_at_the_end() -> None:
    store, clock = MemoryLeases(), FakeClock()
    held = lock(store, clock)
    held.observe()
    assert store.writes == 0, "observing writes nothing: a pass with nothing to write never takes it"
    held.before_write("PATCH", OBJECT)
    assert store.holder == "cli" and held.held and held.waited == 0 and held.replans == 0
    held.before_write("PATCH", OBJECT)  # held: later writes go out at once
    assert store.writes == 1
    held.release()
    assert store.holder == "" and not held.held


def test_the_leases_own_requests_never_wait_for_it() -> None:
    store, clock = MemoryLeases(), FakeClock()
    holder = other(store)
    assert holder.step()
    held = lock(store, clock, timeout=0)
    held.observe()
    held.before_write("PUT", OWN)  # no LeaseError: the lock's own write is not a write of the pass
    assert store.holder == "pipeline-b"


def test_a_lease_held_at_the_start_is_waited_for_and_the_pass_planned_again() -> None:
    store, clock = MemoryLeases(), FakeClock()
    holder = other(store)
    assert holder.step()
    held = lock(store, clock)
    held.observe()
    clock.after(5.0, holder.release)  # the other run finishes after 5 s
    with pytest.raises(LeaseChanged):  # what this pass read may predate the other run's writes
        held.before_write("PATCH", OBJECT)
    assert store.holder == "cli" and 5.0 <= held.waited < 6.5 and held.replans == 1
    with pytest.raises(LeaseChanged):  # every write of the stale plan is refused, not only the first
        held.before_write("DELETE", OBJECT)
    held.replan()
    held.before_write("PATCH", OBJECT)  # the new plan writes
    assert store.holder == "cli"


def test_a_lease_taken_between_the_start_and_the_first_write_plans_again() -> None:
    store, clock = MemoryLeases(), FakeClock()
    held = lock(store, clock)
    held.observe()  # free (absent) when the pass began to read
    holder = other(store)
    assert holder.step()  # another run took it and wrote while this pass read
    assert holder.release()
    with pytest.raises(LeaseChanged):  # free again, but not the record this pass saw: it plans again
        held.before_write("PATCH", OBJECT)


def test_a_lease_held_past_the_lock_timeout_names_its_holder_and_sends_nothing() -> None:
    store, clock = MemoryLeases(), FakeClock()
    holder = other(store)
    assert holder.step()
    for t in range(2, 30, 2):
        clock.after(t, holder.step)  # it keeps renewing, as a live holder does
    held = lock(store, clock, timeout=10)
    held.observe()
    with pytest.raises(LeaseError) as caught:
        held.before_write("PATCH", OBJECT)
    message = str(caught.value)
    assert "held by pipeline-b since " in message and "--lock-timeout 10s" in message, message
    assert "Nothing was written" in message
    assert 10 <= clock.slept < 11 and store.holder == "pipeline-b" and not held.held


def test_a_crashed_holder_is_taken_over_after_its_lease_duration() -> None:
    store, clock = MemoryLeases(), FakeClock()
    assert other(store).step()  # and then it dies: nobody renews
    held = lock(store, clock)
    held.observe()
    with pytest.raises(LeaseChanged):
        held.before_write("PATCH", OBJECT)
    assert store.holder == "cli" and CFG.lease_duration <= clock.slept < CFG.lease_duration + 1.5


class Forbidden(MemoryLeases):
    def get(self) -> dict[str, Any] | None:
        raise ForbiddenError(403, "Forbidden", 'leases.coordination.k8s.io "lease" is forbidden')


def test_a_lease_the_user_may_not_take_refuses_the_write_and_says_which_rights_are_needed() -> None:
    clock = FakeClock()
    held = lock(Forbidden(), clock)
    held.observe()  # a pass that writes nothing never needs it
    with pytest.raises(LeaseError) as caught:
        held.before_write("PATCH", OBJECT)
    assert "get, create and update on leases (coordination.k8s.io)" in str(caught.value)
    assert "Nothing was written" in str(caught.value)


def test_a_run_whose_renewal_is_overdue_writes_nothing_more() -> None:
    store, clock = MemoryLeases(), FakeClock()
    held = lock(store, clock)
    held.observe()
    held.before_write("PATCH", OBJECT)
    clock.advance(CFG.renew_deadline)  # frozen (SIGSTOP) or cut off: no renewal for the renew deadline
    with pytest.raises(ClusterError, match="lost Lease test/lease"):
        held.before_write("PATCH", OBJECT)
    held.release()


class NoNamespace(MemoryLeases):
    """The Lease's namespace does not exist yet (Git declares it: the pass creates it first)."""

    def __init__(self) -> None:
        super().__init__()
        self.namespace_exists = False

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        if not self.namespace_exists:
            raise NotFoundError(404, "NotFound", 'namespaces "test" not found')
        return super().create(lease)


def test_the_write_creating_the_leases_namespace_goes_out_and_the_next_write_takes_the_lease() -> None:
    store, clock = NoNamespace(), FakeClock()
    elector = LeaderElector(store, "cli", CFG, clock=clock, wall=clock.wall)
    held = SourceLock(elector, timeout=60, namespace="test", clock=clock, sleep=clock.sleep)
    held.observe()
    with pytest.raises(LeaseError, match="its namespace does not exist"):  # any other write needs the Lease
        held.before_write("PATCH", OBJECT)
    held.before_write("PATCH", "/api/v1/namespaces/test")  # no run can hold a Lease in it yet
    assert not held.held
    store.namespace_exists = True
    held.before_write("PATCH", OBJECT)
    assert held.held and store.holder == "cli" and held.replans == 0
    held.release()


def test_a_free_lease_taken_slowly_is_no_wait_for_another_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A create that takes 0.2 s on a loaded API server is not a wait for another run: `sync` says nothing on
    stderr (a warning there broke `sync | head` quietness under load, tests/reliability/test_output_faults)."""
    from gitops_sync.cluster import sourcelock

    warned: list[str] = []

    class Recorder:
        def __getattr__(self, level: str) -> Any:
            return lambda event, **_kw: warned.append(f"{level}: {event}") if level == "warning" else None

    monkeypatch.setattr(sourcelock, "log", Recorder())
    store, clock = MemoryLeases(), FakeClock()
    slow_create = store.create

    def create(lease: dict[str, Any]) -> dict[str, Any]:
        clock.advance(0.2)
        return slow_create(lease)

    store.create = create  # type: ignore[method-assign]
    held = lock(store, clock)
    held.observe()
    held.before_write("PATCH", OBJECT)
    assert store.holder == "cli" and held.waited >= 0.2
    assert warned == []
