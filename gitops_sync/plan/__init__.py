"""Desired vs live, decided without side effects: targets, field paths, ownership, diffs, the change set.

Rendered objects come in (from `render`), live objects and the API server's dry-run answers are handed in
by `apply`; out go `Entry`s in a `ChangeSet`, which `report` prints and `apply` acts on. No I/O here.
"""

from gitops_sync.plan.changeset import Action, ChangeSet, CoOwner, Entry, FieldChange, SharedWith
from gitops_sync.plan.diff import FieldDiff, diff_intent, diff_objects
from gitops_sync.plan.masking import Redactor, mask_diff, mask_literals, mask_secret
from gitops_sync.plan.planner import Target, resolve

__all__ = [
    "Action",
    "ChangeSet",
    "CoOwner",
    "Entry",
    "FieldChange",
    "FieldDiff",
    "Redactor",
    "SharedWith",
    "Target",
    "diff_intent",
    "diff_objects",
    "mask_diff",
    "mask_literals",
    "mask_secret",
    "resolve",
]
