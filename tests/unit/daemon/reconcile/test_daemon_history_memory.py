"""The ownership history's compact storage (for the daemon's RSS at 10,000 objects) keeps its behaviour."""

from __future__ import annotations

from gitops_sync.daemon.reconcile.history import FieldRecord, OwnershipHistory
from gitops_sync.resource import ObjectKey
from tests.unit.daemon.reconcile.test_daemon_history import KEY, PATHS, REPLICAS, deployment, mf
from tests.unit.fakes import FakeClock


def test_records_are_capped_at_max_records_keeping_the_newest() -> None:
    clock = FakeClock()
    h = OwnershipHistory(max_records=3, clock=clock.wall)
    for n in range(6):
        clock.advance(1)
        h.observe(KEY, PATHS[:1], deployment(n, [mf("kubectl" if n % 2 else "helm", REPLICAS)], rv=n))
    values = [r.value for r in h.fields(KEY)[".spec.replicas"]]
    assert values == [3, 4, 5]


def test_unchanged_values_add_no_record_and_records_have_no_instance_dict() -> None:
    h = OwnershipHistory(clock=FakeClock().wall)
    for rv in range(3):
        h.observe(KEY, PATHS[:1], deployment(2, [mf("helm", REPLICAS)], rv=rv))
    (record,) = h.fields(KEY)[".spec.replicas"]
    assert isinstance(record, FieldRecord)
    assert not hasattr(record, "__dict__")  # slots: one of these exists for every field of every object


def test_records_of_different_objects_share_one_owners_tuple() -> None:
    h = OwnershipHistory(clock=FakeClock().wall)
    other = ObjectKey("apps", "Deployment", "ns", "other")
    h.observe(KEY, PATHS[:1], deployment(2, [mf("helm", REPLICAS)], rv=1))
    h.observe(other, PATHS[:1], deployment(3, [mf("helm", REPLICAS)], rv=2))
    (mine,), (theirs,) = h.fields(KEY)[".spec.replicas"], h.fields(other)[".spec.replicas"]
    assert mine.owners == ("helm",) and mine.owners is theirs.owners
