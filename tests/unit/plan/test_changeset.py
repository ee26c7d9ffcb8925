"""plan/changeset.py: what a pass entry costs to hold (the daemon keeps one per object between passes)."""

from __future__ import annotations

import dataclasses

from gitops_sync.plan.changeset import Action, Entry
from gitops_sync.resource import ObjectKey


def test_an_entry_holds_its_fields_in_slots_not_a_dict_per_object() -> None:
    e = Entry(ObjectKey("apps", "Deployment", "ns", "d"), "apps/v1", Action.UNCHANGED)
    assert not hasattr(e, "__dict__")  # 20,000 entries held by the daemon: no instance dict each
    moved = dataclasses.replace(e, action=Action.UPDATE, message="m")
    assert (moved.key, moved.action, moved.message, moved.drift) == (e.key, Action.UPDATE, "m", [])
