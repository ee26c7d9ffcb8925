"""The state of one pass: what it was asked, and what its phases learnt so far.

`Engine.run` builds a `PassState` and hands it to each phase in turn (`phases.PHASES`), as gitops-engine's
sync context carries one sync's tasks through its phases; its change set (`cs`) is the pass's result.
Every decision of which phase runs reads this state alone (`phases.due`), so it is tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gitops_sync.apply.inventory import Inventory
from gitops_sync.apply.manager import LiveMap, OnEntry
from gitops_sync.engine.naming import checkout_label, inventory_of, source_identity
from gitops_sync.engine.options import PassOptions
from gitops_sync.plan.changeset import ChangeSet, Entry, Ignored, SharedWith
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey
from gitops_sync.source import Checkout, SourceIdentity

LiveOf = Callable[[Sequence[Target]], LiveMap]


@dataclass
class PassState:
    """One pass's data, filled in by its phases in order (each field says which phase sets it)."""

    checkout: Checkout
    opts: PassOptions
    dry_run: bool
    partial: bool  # `only` narrowed the pass: it never prunes and never rewrites the inventory
    identity: SourceIdentity
    cs: ChangeSet  # the result: entries and errors, as the phases add them
    wanted: list[Target]  # what prune keeps and the inventory records: the refused too
    targets: list[Target]  # what is read, planned and sent (the refused left out; ignore rules applied)
    refused: Mapping[ObjectKey, str]  # a tenant's objects its ServiceAccount may not read, with the refusal
    live_of: LiveOf
    on_entry: OnEntry | None = None
    on_ready: Callable[[ObjectKey], None] | None = None
    # read_inventory, find_legacy: ours, and one of the old naming of this very source being taken over
    inventory: Inventory | None = None
    legacy: Inventory | None = None
    # what they recorded before this pass wrote anything
    old_kinds: set[str] = field(default_factory=set)
    old_namespaces: set[str] = field(default_factory=set)
    live: LiveMap = field(default_factory=dict)  # read_live
    ignored: dict[ObjectKey, list[Ignored]] = field(default_factory=dict)  # apply_ignore_rules
    shared: dict[ObjectKey, SharedWith] = field(default_factory=dict)  # find_shared: left alone
    taken: dict[ObjectKey, SharedWith] = field(default_factory=dict)  # find_shared: taken over
    dying: set[ObjectKey] = field(default_factory=set)  # plan_terminating: being deleted, not applied
    pruned_all: bool = True  # prune: no member refused or failed
    kept: set[ObjectKey] = field(default_factory=set)  # prune: members `prune: disabled` keeps (still ours)
    waiting_since: float = 0.0  # start_wait_clock: one --timeout for held deletions and health together
    release: str = ""  # decide_release: "install", "upgrade" or "" (no hooks run) for the Helm hooks
    stopped: bool = False  # a failed hook: no phase runs after it (nothing applied or pruned after a pre-hook)

    @classmethod
    def begin(
        cls,
        checkout: Checkout,
        all_targets: Sequence[Target],
        opts: PassOptions,
        *,
        apply: bool,
        live_of: LiveOf,
        only: set[ObjectKey] | None = None,
        refused: Mapping[ObjectKey, str] | None = None,
        on_entry: OnEntry | None = None,
        on_ready: Callable[[ObjectKey], None] | None = None,
    ) -> PassState:
        """The state before any phase: the targets of this pass split, an empty change set named."""
        dry_run = opts.dry_run or not apply
        name, namespace, identity_text = inventory_of(checkout, opts)
        cs = ChangeSet(
            revision=checkout.revision,
            signer=checkout.signer,
            source=checkout_label(checkout),
            dry_run=dry_run,
            inventory=name,
            inventory_namespace=namespace,
            source_identity=identity_text,
            charts=list(checkout.charts),
        )
        wanted = list(all_targets) if only is None else [t for t in all_targets if t.key in only]
        refused = refused or {}
        return cls(
            checkout=checkout,
            opts=opts,
            dry_run=dry_run,
            partial=only is not None,
            identity=source_identity(checkout),
            cs=cs,
            wanted=wanted,
            targets=[t for t in wanted if t.key not in refused],
            refused=refused,
            live_of=live_of,
            on_entry=on_entry,
            on_ready=on_ready,
        )

    @property
    def inv(self) -> Inventory:
        """Our inventory, as read_inventory found it (and as the pass's records since left it)."""
        if self.inventory is None:
            raise RuntimeError("the inventory is read by the pass's first phase")
        return self.inventory

    @property
    def inventories(self) -> list[Inventory]:
        """Ours, and the old one of this very source being taken over: whose members are ours."""
        return [self.inv, *([self.legacy] if self.legacy else [])]

    @property
    def records(self) -> bool:
        """Whether the pass writes the inventory: a real (not dry) pass of the whole source with objects."""
        return not self.dry_run and bool(self.wanted) and not self.partial

    @property
    def denied(self) -> list[Target]:
        """The refused targets: planned as errors, never read or sent."""
        return [t for t in self.wanted if t.key in self.refused]

    def add(self, entry: Entry) -> None:
        """An entry planned outside the resource manager: into the change set, and to whoever listens."""
        add_entry(self.cs, entry, self.on_entry)


def add_entry(cs: ChangeSet, entry: Entry, on_entry: OnEntry | None) -> None:
    """`entry` into the change set, and to `on_entry` (the CLI's progress bar, the daemon's live status)."""
    cs.entries.append(entry)
    if on_entry:
        on_entry(entry)


def kinds_and_namespaces(targets: Sequence[Target]) -> tuple[set[str], set[str]]:
    """The group-kinds and namespaces of `targets`, as the inventory records them."""
    return {t.key.group_kind for t in targets}, {t.key.namespace for t in targets if t.key.namespace}
