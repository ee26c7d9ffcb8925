"""The phases of one pass, in order (`PHASES`): each reads and fills the pass's `PassState`.

Which phases run is decided from the state alone, by each phase's `when`, right before it would run
(`due` lists them for a state): a dry run or a partial pass never writes the inventory, a pass never prunes
once an object failed, the revision is recorded as applied only after a clean prune. The change set the
phases fill is what `Engine.run` returns to the CLI's report and the daemon's reconciler.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gitops_sync import conventions
from gitops_sync.apply import inventory
from gitops_sync.apply.manager import NOT_ATTEMPTED
from gitops_sync.engine import delete_hooks, hooks, legacy
from gitops_sync.engine.positions import locate_fields
from gitops_sync.engine.prune import Prune, wait_deleted
from gitops_sync.engine.state import PassState, kinds_and_namespaces
from gitops_sync.errors import ClusterError, NewerRevisionError
from gitops_sync.log import get_logger
from gitops_sync.plan import bookkeeping, ignore, planner, policy
from gitops_sync.plan.changeset import Action, Consequence, Entry
from gitops_sync.plan.planner import Target
from gitops_sync.plan.terminating import desired_entry as terminating_entry
from gitops_sync.plan.terminating import terminating
from gitops_sync.resource import ObjectKey
from gitops_sync.source.checkout import is_ancestor, short_revision

if TYPE_CHECKING:
    from gitops_sync.engine.core import Engine

log = get_logger(__name__)


# -- reading: what is recorded, what is live ------------------------------------------------------------


def read_inventory(engine: Engine, s: PassState) -> None:
    """Our inventory parent, and what it recorded before this pass writes anything."""
    s.inventory = inventory.load(
        engine.client,
        s.cs.inventory,
        s.cs.inventory_namespace,
        s.cs.source_identity,
        s.identity.inventory_name(),
        cluster_id=engine.cluster_id,
    )
    s.old_kinds, s.old_namespaces = set(s.inv.group_kinds), set(s.inv.namespaces)


def decide_release(_engine: Engine, s: PassState) -> None:
    """Install or upgrade, for the Helm hooks (engine/hooks.py): install while no pass of this source has
    completed (the inventory records no applied revision); upgrade on a new revision after one has. A plain
    directory has no revision: install only when its inventory does not exist yet, never upgrade."""
    applied = s.inv.recorded.get(conventions.APPLIED_REVISION, "")
    if not s.checkout.revision:
        s.release = "" if s.inv.exists else "install"
    elif not applied:
        s.release = "install"
    else:
        s.release = "upgrade" if applied != s.checkout.revision else ""


def run_pre_hooks(engine: Engine, s: PassState) -> None:
    """pre-install / pre-upgrade hooks, before any object is applied; one failing stops the pass."""
    if s.release and s.checkout.hooks:
        s.stopped = not hooks.run_event(engine, s, f"pre-{s.release}")


def run_post_hooks(engine: Engine, s: PassState) -> None:
    """post-install / post-upgrade hooks, after apply and prune; one failing keeps the revision unrecorded."""
    if s.release and s.checkout.hooks:
        s.stopped = not hooks.run_event(engine, s, f"post-{s.release}")


def refuse_older_commit(_engine: Engine, s: PassState) -> None:
    """A `sync` of a commit the inventory has seen superseded is refused before anything is written.

    Two pipelines of one repository finishing out of order would otherwise have the older one undo the
    newer one's changes and, with --prune, delete what it added."""
    inv, checkout = s.inv, s.checkout
    for what, key in (("applied", conventions.APPLIED_REVISION), ("attempted", conventions.ATTEMPTED_REVISION)):
        theirs = inv.recorded.get(key, "")
        if theirs and is_ancestor(checkout, checkout.revision, theirs):
            ours = short_revision(checkout.revision)
            raise NewerRevisionError(
                f"the inventory ConfigMap {inv.namespace}/{inv.name} records revision {short_revision(theirs)} "
                f"({what}), a newer commit of this source: {ours} is its ancestor. Applying {ours} would undo "
                "what the newer one applied (with --prune, delete what it added); nothing was written. To go "
                f"back to {ours} on purpose pass --allow-rollback, or commit a revert (it is newer)"
            )


def find_legacy_inventory(engine: Engine, s: PassState) -> None:
    """An inventory of the old naming of this very source: its members are ours too (engine/legacy.py)."""
    s.legacy = legacy.find(engine, s.inv, s.checkout, s.identity, s.cs.source)
    if s.legacy is not None:
        s.old_kinds |= s.legacy.group_kinds
        s.old_namespaces |= s.legacy.namespaces


def read_live(_engine: Engine, s: PassState) -> None:
    """The live objects of the targets: fresh reads, or the daemon's watch cache."""
    s.live = s.live_of(s.targets)


def apply_ignore_rules(engine: Engine, s: PassState) -> None:
    """The apply bodies without what the rules leave to the cluster (copies: targets are reused)."""
    rules = ignore.rules_for(s.opts.ignore, s.checkout.root, s.checkout.repo_root)
    if rules:
        s.targets = [_ignoring(engine, s, t, rules) for t in s.targets]


def _ignoring(engine: Engine, s: PassState, t: Target, rules: Sequence[ignore.IgnoreRule]) -> Target:
    applied = ignore.apply_rules(t.key, t.manifest, s.live.get(t.key), rules, engine.field_manager)
    if applied.ignored:
        s.ignored[t.key] = applied.ignored
    return t if applied.manifest is t.manifest else replace(t, manifest=applied.manifest)


def add_bookkeeping(_engine: Engine, s: PassState) -> None:
    """Membership, adoption and intent hash into each apply body, given what is live."""
    legacy_id = s.legacy.id if s.legacy else None
    for t in s.targets:
        bookkeeping.finalize(t, s.live.get(t.key), s.inv.id, legacy_id)


def find_shared(engine: Engine, s: PassState) -> None:
    """Targets live as members of another ApplySet: left alone, or taken over by explicit opt-in.

    Members of an old inventory of this very source being taken over are ours, not shared."""
    own_ids = {i.id for i in s.inventories}
    found = {
        t.key: (t, other) for t in s.targets if (other := bookkeeping.foreign_applyset(s.live.get(t.key), own_ids))
    }
    parents = {other: inventory.find_parent(engine.client, other) for _t, other in found.values()}
    for key, (t, other) in found.items():
        (s.taken if s.opts.adopt_shared or policy.wants_adoption(t) else s.shared)[key] = parents[other]


# -- writing: the inventory first, then the objects -----------------------------------------------------


def record_intent(engine: Engine, s: PassState) -> None:
    """The parent records the union first, so a crash mid-pass never hides a member from prune: every
    kind and namespace an apply is sent to (not the refused: nothing is sent for them)."""
    s.cs.entries += _ensure_inventory_namespace(engine, s)
    sent_kinds, sent_spaces = kinds_and_namespaces(s.targets)
    _record(engine, s, s.old_kinds | sent_kinds, s.old_namespaces | sent_spaces)


def _ensure_inventory_namespace(engine: Engine, s: PassState) -> list[Entry]:
    """The parent ConfigMap needs its namespace: when Git creates that namespace, create it first."""
    inv = s.inv
    first = [
        t
        for t in s.targets
        if t.key.kind == "Namespace" and not t.key.group and t.key.name == inv.namespace and s.live.get(t.key) is None
    ]
    if not first:
        return []
    return engine.manager.apply_all(first, s.live, policy=s.opts.policy, on_entry=s.on_entry)


def _record(engine: Engine, s: PassState, kinds: set[str], namespaces: set[str], *, applied: bool = False) -> None:
    inventory.save(
        engine.client,
        s.inv,
        kinds,
        namespaces,
        field_manager=engine.field_manager,
        revision=s.checkout.revision,
        source=s.cs.source,
        applied=applied,
        delete_hooks=delete_hooks.to_record(engine, s, applied=applied),
    )


def plan_shared(engine: Engine, s: PassState) -> None:
    """Members of another ApplySet: left alone, reported as `shared` conflicts."""
    for t in s.targets:
        if t.key in s.shared:
            live = s.live[t.key] or {}
            identity = s.cs.source_identity
            s.add(
                planner.shared_entry(
                    t, live, s.shared[t.key], engine.field_manager, dry_run=s.dry_run, identity=identity
                )
            )


def plan_terminating(_engine: Engine, s: PassState) -> None:
    """Being deleted: it will vanish whatever is applied now; re-created once gone."""
    for t in s.targets:
        pending = terminating(s.live.get(t.key), in_git=True)
        if pending is not None and t.key not in s.shared:
            s.dying.add(t.key)
            s.add(terminating_entry(t, pending, dry_run=s.dry_run))


def plan_create_only(engine: Engine, s: PassState) -> None:
    """Create-only objects that exist: never updated."""
    for t in s.targets:
        existing = s.live.get(t.key)
        if existing is not None and t.key not in s.shared and t.key not in s.dying and policy.is_create_only(t):
            s.add(planner.create_only_entry(t, existing, engine.field_manager, dry_run=s.dry_run))


# A refused read (a tenant's ServiceAccount may not get the object) is the answer a request would have had.
_DENIED: dict[str, Any] = {"status": 403, "reason": "Forbidden"}


def plan_refused(_engine: Engine, s: PassState) -> None:
    """Objects the source may not read: nothing of the live object is read, the entry is the refusal alone."""
    for t in s.denied:
        s.add(Entry(t.key, t.info.api_version, Action.ERROR, message=s.refused[t.key], origin=t.origin, **_DENIED))


def apply_objects(engine: Engine, s: PassState) -> None:
    """Every target no earlier phase planned: applied (or dry-run), stage by stage."""
    done = {e.key for e in s.cs.entries}
    s.cs.entries += engine.manager.apply_all(
        [t for t in s.targets if t.key not in done],
        s.live,
        policy=s.opts.policy,
        dry_run=s.dry_run,
        on_entry=s.on_entry,
    )
    skipped = [e.message for e in s.cs.entries if e.message.startswith(NOT_ATTEMPTED)]
    if skipped:  # the API server went away (or the deadline passed) mid-pass: say so once, up top
        why = skipped[0].removeprefix(NOT_ATTEMPTED)
        s.cs.errors.append(
            Consequence(f"stopped early: {len(skipped)} of {len(s.targets)} object(s) not attempted: {why}")
        )


def forget_refused(engine: Engine, s: PassState) -> None:
    """Take back what this pass recorded first and the API server then refused everywhere.

    A kind or namespace recorded for the first time by this pass (before its applies, for a crash's
    sake) whose every object was refused as a whole (403, 422, ...: `Entry.wrote_nothing`) holds nothing
    of this source: it was not recorded before, so no earlier pass left a member there, and this one
    stored none. Kept, it would make every later prune LIST it, and a LIST forbidden like the apply was
    would block the source for good once Git drops the object. Anything else (an object applied, an
    answer that may have landed, a record from before) stays recorded.
    """
    by_key = {e.key: e for e in s.cs.entries}
    kinds, spaces = kinds_and_namespaces(s.targets)
    for t in s.targets:
        e = by_key.get(t.key)
        if e is None or not e.wrote_nothing:
            kinds.discard(t.key.group_kind)
            spaces.discard(t.key.namespace)
    inv = s.inv
    kinds, spaces = kinds - s.old_kinds, spaces - s.old_namespaces - {inv.namespace}
    if not kinds and not spaces:
        return
    log.info(
        "not keeping in the inventory what only refused applies reached", kinds=sorted(kinds), namespaces=sorted(spaces)
    )
    try:
        _record(engine, s, inv.group_kinds - kinds, inv.namespaces - spaces)
    except ClusterError as exc:  # kept recorded: the next pass that is refused there again tries again
        log.warning("cannot update the inventory after refused applies", error=str(exc))


# -- reporting what was planned -------------------------------------------------------------------------


def locate_in_git(_engine: Engine, s: PassState) -> None:
    """The fields the ignore rules left out, and where Git writes each reported field."""
    for e in s.cs.entries:
        e.ignored = s.ignored.get(e.key, [])
    locate_fields(s.cs.entries, s.wanted, s.checkout.root)


def note_takeovers(_engine: Engine, s: PassState) -> None:
    """Objects taken over from another ApplySet say so, and that prune will release them."""
    verb = "would take" if s.dry_run else "took"
    for e in s.cs.entries:
        if e.key in s.taken and e.action is not Action.ERROR:
            e.message = f"{e.message}; {verb} it over from {s.taken[e.key].describe()} (adopted: prune releases it)"


# -- pruning, the applied record, waiting ---------------------------------------------------------------


def start_wait_clock(_engine: Engine, s: PassState) -> None:
    """--wait: one --timeout for held deletions and health together, from the end of the applies."""
    s.waiting_since = time.monotonic()


def prune(engine: Engine, s: PassState) -> None:
    """Members that left Git: deleted, released or kept (engine/prune.py)."""
    s.pruned_all = Prune(engine, s.cs, s.inventories, s.opts, s.dry_run, s.on_entry, s.kept).run(s.wanted)


def wait_for_deletions(engine: Engine, s: PassState) -> None:
    wait_deleted(engine, s.cs, s.opts.timeout)


def run_pre_delete_hooks(engine: Engine, s: PassState) -> None:
    """pre-delete hooks of the releases that left Git, before prune deletes their objects; one failing stops
    the pass (nothing pruned). engine/delete_hooks.py."""
    delete_hooks.run_leaving(engine, s, delete_hooks.PRE)


def run_post_delete_hooks(engine: Engine, s: PassState) -> None:
    """post-delete hooks of the releases that left Git, once prune deleted their objects."""
    delete_hooks.run_leaving(engine, s, delete_hooks.POST)


def record_applied(engine: Engine, s: PassState) -> None:
    """Only now is the revision recorded as applied; an old inventory of this source is retired after it.

    A deletion still pending (finalizers hold a member, or an object Git wants is going) left the
    revision incomplete, and this phase out: the inventory goes on recording what is there."""
    if s.legacy is not None:  # whatever still carries the old id moves into ours before it is retired
        legacy.adopt_members(engine, s.cs, s.inv, s.legacy)
    kinds, spaces = _applied_kinds_and_namespaces(engine, s)
    try:
        _record(engine, s, kinds, spaces, applied=True)
    except ClusterError as exc:
        s.cs.errors.append(f"applied, but the inventory could not record revision {s.checkout.revision}: {exc}")
    if s.legacy is not None and not s.cs.has_errors:
        legacy.retire(engine, s.legacy, s.cs.inventory)


def _applied_kinds_and_namespaces(engine: Engine, s: PassState) -> tuple[set[str], set[str]]:
    """What the applied record keeps. With --prune the recorded group-kinds shrink, now that every member
    outside them is gone; a kind the server stopped serving stays recorded (with its namespaces): its
    members cannot be listed. Members `prune: disabled` keeps are still ours, so still recorded."""
    group_kinds, namespaces = kinds_and_namespaces(s.wanted)
    inv = s.inv
    if not s.opts.prune:
        return inv.group_kinds | group_kinds, inv.namespaces | namespaces
    unserved = inventory.unserved_kinds(engine.discovery, inv) - group_kinds
    if unserved:
        log.info("keeping unserved kinds in the inventory until their members are gone", kinds=sorted(unserved))
        namespaces = namespaces | inv.namespaces
    kinds = group_kinds | unserved | {k.group_kind for k in s.kept}
    return kinds, namespaces | {k.namespace for k in s.kept if k.namespace}


def wait_until_healthy(engine: Engine, s: PassState) -> None:
    """--wait: the applied objects (not those being deleted) until healthy, in what is left of --timeout."""
    left = max(0.0, s.opts.timeout - (time.monotonic() - s.waiting_since))
    targets = [t for t in s.targets if t.key not in s.dying]
    started = time.monotonic()
    log.info("waiting until healthy", objects=len(targets), timeout=left)
    try:
        not_ready = engine.manager.wait(targets, left, on_ready=s.on_ready)
    except ClusterError as exc:
        s.cs.errors.append(f"wait abandoned after {time.monotonic() - started:.0f}s: {exc}")
        return
    by_key: dict[ObjectKey, str] = {r.key: f"{r.status.value}: {r.message}" for r in not_ready}
    for e in s.cs.entries:
        e.health = by_key.get(e.key, "Current") if e.action is not Action.PRUNE else ""
    if not_ready:
        names = "; ".join(f"{r.key} ({r.status.value}: {r.message})" for r in not_ready)
        s.cs.errors.append(f"not ready after {time.monotonic() - started:.0f}s: {names}")


# -- which phases run, and in which order ---------------------------------------------------------------


def always(_s: PassState) -> bool:
    return True


def refuses_older(s: PassState) -> bool:
    """`sync` without --allow-rollback, writing: a commit older than the recorded one is refused."""
    return s.opts.refuse_older and not s.dry_run


def named_by_source(s: PassState) -> bool:
    """No --name: the inventory is named by the source, so one of the old naming may exist."""
    return not s.opts.name


def records(s: PassState) -> bool:
    return s.records


def prunes(s: PassState) -> bool:
    """--prune on a pass of the whole source (a partial pass lacks the picture prune needs)."""
    return s.opts.prune and not s.partial


def waits(s: PassState) -> bool:
    """--wait, on a pass that changes something (a dry run has nothing to wait for)."""
    return s.opts.wait and not s.dry_run


def runs_hooks(s: PassState) -> bool:
    """A whole pass that writes (the phase itself runs nothing unless installing or upgrading a source with
    Helm hooks: decide_release, run_pre_hooks)."""
    return not s.dry_run and not s.partial


def runs_post_hooks(s: PassState) -> bool:
    """As runs_hooks, once the apply and prune left no error (a post-hook follows a complete release)."""
    return runs_hooks(s) and not s.cs.has_errors and s.pruned_all


def deletes_releases(s: PassState) -> bool:
    """A whole pass that writes and prunes, nothing failed so far, delete hooks recorded (engine/delete_hooks.py):
    the releases that left Git are deleted by this prune, so their pre-delete hooks run before it."""
    recorded = s.inventory is not None and delete_hooks.any_recorded(s.inventory)
    return recorded and prunes(s) and runs_hooks(s) and not s.cs.has_errors


def runs_post_delete_hooks(s: PassState) -> bool:
    """As deletes_releases, once prune left nothing undone."""
    return deletes_releases(s) and s.pruned_all


def prunes_and_waits(s: PassState) -> bool:
    return prunes(s) and waits(s)


def completes(s: PassState) -> bool:
    """The pass applied everything and pruned everything that left Git: nothing failed, nothing pending."""
    return s.records and s.pruned_all and not s.cs.has_errors and not s.cs.has_pending


@dataclass(frozen=True)
class Phase:
    """One step of a pass: `run` does it; `when` decides from the state alone whether it runs."""

    name: str
    run: Callable[[Engine, PassState], None]
    when: Callable[[PassState], bool] = always


PHASES: tuple[Phase, ...] = (
    Phase("read the inventory", read_inventory),
    Phase("decide install or upgrade", decide_release),
    Phase("refuse an older commit", refuse_older_commit, refuses_older),
    Phase("find a legacy inventory", find_legacy_inventory, named_by_source),
    Phase("read live objects", read_live),
    Phase("apply ignore rules", apply_ignore_rules),
    Phase("add bookkeeping", add_bookkeeping),
    Phase("find shared objects", find_shared),
    Phase("record intent", record_intent, records),
    Phase("plan shared objects", plan_shared),
    Phase("plan terminating objects", plan_terminating),
    Phase("plan create-only objects", plan_create_only),
    Phase("plan refused objects", plan_refused),
    Phase("run pre-install/pre-upgrade hooks", run_pre_hooks, runs_hooks),
    Phase("apply", apply_objects),
    Phase("forget refused kinds", forget_refused, records),
    Phase("locate fields in Git", locate_in_git),
    Phase("note takeovers", note_takeovers),
    Phase("start the wait clock", start_wait_clock, waits),
    Phase("run pre-delete hooks of releases that left Git", run_pre_delete_hooks, deletes_releases),
    Phase("prune", prune, prunes),
    Phase("wait for deletions", wait_for_deletions, prunes_and_waits),
    Phase("run post-delete hooks of releases that left Git", run_post_delete_hooks, runs_post_delete_hooks),
    Phase("run post-install/post-upgrade hooks", run_post_hooks, runs_post_hooks),
    Phase("record applied", record_applied, completes),
    Phase("wait until healthy", wait_until_healthy, waits),
)


def due(s: PassState, phases: Sequence[Phase] = PHASES) -> list[str]:
    """The names of the phases that would run on `s` as it is now (each decides again when reached)."""
    return [p.name for p in phases if p.when(s)]
