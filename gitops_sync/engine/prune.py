"""Prune: delete the members of this source's inventory that left Git, under every guard.

A pass's prune phase and a deleted source's collection (`Engine.collect`) run a `Prune`; the entries it
makes go into their change set, and `cs.prune_left` names what it could not remove.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gitops_sync import conventions
from gitops_sync.apply import cascade, inventory
from gitops_sync.apply.inventory import Inventory
from gitops_sync.apply.manager import OnEntry
from gitops_sync.cluster.lease import lease_name
from gitops_sync.engine.options import PassOptions
from gitops_sync.engine.state import add_entry
from gitops_sync.errors import ClusterError
from gitops_sync.log import get_logger
from gitops_sync.plan import policy
from gitops_sync.plan.changeset import Action, ChangeSet, Consequence, Entry
from gitops_sync.plan.planner import Target
from gitops_sync.plan.terminating import terminating
from gitops_sync.resource import Manifest, ObjectKey

if TYPE_CHECKING:
    from gitops_sync.engine.core import Engine

log = get_logger(__name__)


def blocked_by_failure(cs: ChangeSet, *, dry_run: bool) -> Consequence | None:
    """Why nothing is pruned on a pass where some object failed (or could not be planned), else None."""
    if not cs.has_errors:
        return None
    return Consequence(
        "prune not evaluated: some objects could not be planned"
        if dry_run
        else "prune skipped: some objects failed to apply; nothing is deleted on a failed pass"
    )


@dataclass
class Prune:
    """Prune the members that left Git. `kept` hears of the members `prune: disabled` keeps (still
    labelled ours: the inventory must go on recording them).

    A member whose deletion is pending (finalizers hold it) is no failure, but no member gone either
    (`cs.has_pending`): callers record the pass as complete only once it is gone. `parent_goes`: the
    caller deletes the inventory parent afterwards (a deleted source's collection), so members kept
    by `prune: disabled` do not need it; `pending_done`: a member held by finalizers counts as gone there
    (the Namespace holding the parent does not wait for it)."""

    engine: Engine
    cs: ChangeSet
    invs: Sequence[Inventory]  # ours first, then an old inventory of this source being taken over
    opts: PassOptions
    dry_run: bool
    on_entry: OnEntry | None = None
    kept: set[ObjectKey] | None = None
    parent_goes: bool = False
    pending_done: bool = False

    def run(self, targets: Sequence[Target]) -> bool:
        """Prune every member not among `targets`; True when none was refused or failed."""
        refusal = blocked_by_failure(self.cs, dry_run=self.dry_run)
        if refusal is not None:
            self.cs.errors.append(refusal)
            return False
        members = self._members()
        if members is None:
            return False
        wanted = {t.key for t in targets}
        gone = [m for k, m in members.items() if k not in wanted]
        if not targets and gone and not self.opts.allow_empty:
            self.cs.errors.append(
                f"the source rendered zero objects: refusing to prune {len(gone)} object(s) "
                "(pass --allow-empty if the repository is meant to be empty)"
            )
            return False
        disabled = [m for m in gone if policy.prune_disabled(m)]
        for m in disabled:  # gitops-sync.io/prune: disabled
            self._keep(m, f"left Git; kept ({conventions.PRUNE}: {conventions.PRUNE_DISABLED})")
        gone = [m for m in gone if not policy.prune_disabled(m)]
        # The Namespace holding our inventory parent: deleting it deletes the parent with it.
        parent = self.invs[0].parent_key
        holder = _holder(gone, parent)
        gone = [m for m in gone if m is not holder]
        refused = self._refusals(gone, holder, len(targets) + (0 if self.parent_goes else len(disabled)))
        for e in refused:
            add_entry(self.cs, e, self.on_entry)
        blocked = {e.key for e in refused}
        gone = [m for m in gone if ObjectKey.of(m) not in blocked]
        entries = self.engine.manager.prune(gone, dry_run=self.dry_run, on_entry=self.on_entry)
        if holder is not None and ObjectKey.of(holder) not in blocked:
            entries += self._holder_last(holder, entries, refused)
        self.cs.entries.extend(entries)
        # Held by a finalizer is pending, not left behind: reported as such (exit 1), never as a failure.
        pending = (Action.PRUNE, Action.TERMINATING)
        self.cs.prune_left = [e.key for e in [*refused, *entries] if e.action not in pending]
        return not self.cs.prune_left

    def _members(self) -> dict[ObjectKey, Manifest] | None:
        """Every member of the inventories; None (the reason in the errors) when they cannot be trusted."""
        members: dict[ObjectKey, Manifest] = {}
        client = self.engine.client
        for inv in self.invs:
            foreign = inv.foreign_cluster()
            if foreign:
                self.cs.errors.append(
                    f"prune refused: {foreign}. The parent was copied from another cluster (a backup restored "
                    "here, a migration) or the kubeconfig now points at another cluster: nothing is deleted. If "
                    f"this cluster is where its members live, remove the annotation ({conventions.CLUSTER_ID}) "
                    "and the next pass records this cluster"
                )
                return None
        try:
            for inv in self.invs:
                if inv.exists:
                    members.update(inventory.list_members(client, self.engine.discovery, inv))
        except ClusterError as exc:
            self.cs.errors.append(f"prune not attempted: cannot list the members of the inventory: {exc}")
            return None
        if not self.dry_run:  # members another pass applied since this one recorded (a newer revision's) stay
            for inv in self.invs:
                changed = inventory.changed_since(client, inv)
                if changed:
                    self.cs.errors.append(
                        f"prune skipped: the inventory ConfigMap {inv.namespace}/{inv.name} was written by another "
                        f"pass of this source since this one recorded it ({changed}); nothing is deleted against "
                        "a record that may be newer than this pass"
                    )
                    return None
        return members

    def _refusals(self, gone: list[Manifest], holder: Manifest | None, remaining: int) -> list[Entry]:
        """The members not deleted, each with why: the Namespace holding the parent while the source still
        records other objects (whatever --prune-cascade says: the record of those would go), and, unless
        --prune-cascade, a Namespace or CRD still holding objects this prune does not remove."""
        parent = self.invs[0].parent_key
        refused: list[Entry] = []
        if holder is not None and remaining:
            refused.append(cascade.inventory_refusal(holder, parent, remaining))
        if not self.opts.prune_cascade:
            last = [holder] if holder is not None and not refused else []
            refused += cascade.refusals(
                self.engine.client,
                self.engine.discovery,
                [*gone, *last],
                parent=parent,
                ours=[_source_lease(parent)],
                advice=self.opts.cascade_advice,
            )
        return refused

    def _holder_last(self, holder: Manifest, entries: list[Entry], refused: list[Entry]) -> list[Entry]:
        """The last member: the parent has nothing left to record, but it goes only after every other
        member is gone, or one that failed or is still held would be forgotten with it."""
        done = (Action.PRUNE, Action.TERMINATING) if self.pending_done else (Action.PRUNE,)
        if not refused and all(e.action in done for e in entries):
            return self.engine.manager.prune([holder], dry_run=self.dry_run, on_entry=self.on_entry)
        parent = self.invs[0].parent_key
        self._keep(
            holder,
            "left Git; kept until the other members are gone: it holds this source's inventory "
            f"(ConfigMap {parent.namespace}/{parent.name})",
        )
        return []

    def _keep(self, member: Manifest, message: str) -> None:
        """A member that left Git and stays: reported unchanged, and still recorded."""
        entry = Entry(ObjectKey.of(member), str(member.get("apiVersion", "")), Action.UNCHANGED)
        entry.message = message
        add_entry(self.cs, entry, self.on_entry)
        if self.kept is not None:
            self.kept.add(entry.key)


def _holder(gone: Sequence[Manifest], parent: ObjectKey) -> Manifest | None:
    """The Namespace holding the inventory parent among the members that left Git, when prune deletes it:
    an adopted one is only released (it stays, and so does the parent), one already Terminating is past
    saving (pending)."""
    return next(
        (m for m in gone if _holds(m, parent) and not policy.is_adopted(m) and not terminating(m, in_git=False)),
        None,
    )


def _holds(member: Manifest, parent: ObjectKey) -> bool:
    """Whether `member` is the Namespace the inventory parent lives in."""
    key = ObjectKey.of(member)
    return key.kind == "Namespace" and not key.group and key.name == parent.namespace


def _source_lease(parent: ObjectKey) -> ObjectKey:
    """The Lease a run of this source holds beside its inventory (cluster/lease.py: `sync`, the daemon's
    --leader-elect): ours, so it never makes the cascade guard refuse the Namespace they share."""
    name = lease_name(parent.name, parent.namespace, parent.namespace)
    return ObjectKey("coordination.k8s.io", "Lease", parent.namespace, name)


def wait_deleted(engine: Engine, cs: ChangeSet, timeout: float) -> None:
    """`--wait`: a prune held by finalizers is done once the object is gone; still there at the
    timeout, it is an error naming what holds it, as a `--wait` timeout is."""
    held = [e for e in cs.entries if e.action is Action.TERMINATING and e.left_git]
    if not held:
        return
    started = time.monotonic()
    log.info("waiting until deleted", objects=len(held), timeout=timeout)
    try:
        still = engine.manager.wait_deleted([(e.key, e.api_version) for e in held], timeout)
    except ClusterError as exc:
        cs.errors.append(f"wait for deletions abandoned after {time.monotonic() - started:.0f}s: {exc}")
        return
    took = time.monotonic() - started
    for e in held:
        if e.key not in still:
            e.action, e.terminating = Action.PRUNE, None
            e.message = f"deleted (left Git; gone after waiting {took:.1f}s for its finalizers)"
    if still:
        cs.errors.append(f"not deleted after {took:.0f}s: {describe_held([e for e in held if e.key in still])}")


def describe_held(entries: Sequence[Entry], limit: int = 5) -> str:
    """`ConfigMap/ns/a (deletion pending: finalizer x); …`: what still holds the first few."""
    named = "; ".join(
        f"{e.key} ({e.terminating.describe() if e.terminating else 'terminating'})" for e in entries[:limit]
    )
    return named + (f" and {len(entries) - limit} more" if len(entries) > limit else "")
