"""One reconciliation pass: source -> render -> plan -> apply -> prune -> wait -> change set.

`diff`, `sync` and every daemon pass call `Engine.run`; they differ only in options and in where
live state comes from (fresh reads, or the daemon's watch cache).
"""

from __future__ import annotations

import json
import posixpath
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gitops_sync import conventions
from gitops_sync.apply import cascade, inventory
from gitops_sync.apply.manager import (
    NOT_ATTEMPTED,
    LiveMap,
    OnEntry,
    ResourceManager,
    not_attempted_entry,
)
from gitops_sync.cluster.client import Client
from gitops_sync.cluster.discovery import Discovery
from gitops_sync.cluster.lease import lease_name
from gitops_sync.conventions import FIELD_MANAGER, ConflictPolicy
from gitops_sync.errors import ClusterError, NewerRevisionError
from gitops_sync.log import get_logger
from gitops_sync.plan import fieldpath, ignore, planner
from gitops_sync.plan.changeset import Action, ChangeSet, Consequence, Entry, Ignored, SharedWith
from gitops_sync.plan.planner import Target
from gitops_sync.plan.terminating import desired_entry as terminating_entry
from gitops_sync.plan.terminating import terminating
from gitops_sync.render import RenderOptions, locate, render
from gitops_sync.rendercache import DiskStore, RenderCache
from gitops_sync.resource import DesiredObject, Manifest, ObjectKey
from gitops_sync.source import Checkout, SourceIdentity, fetch, identify, mask_url
from gitops_sync.source.allow import LocalRepositories
from gitops_sync.source.checkout import cache_root, is_ancestor, is_remote, knows_commit, short_revision
from gitops_sync.source.identity import label_identities, legacy_inventory_name
from gitops_sync.source.verify import TrustedKeys, verify_checkout

log = get_logger(__name__)


@dataclass
class SourceOptions:
    repo: str
    revision: str | None = None
    path: str | None = None
    cache_dir: Path | None = None
    render: RenderOptions = field(default_factory=RenderOptions)
    timeout: float = 60.0  # seconds for each git command (fetch, checkout)
    # The fleet's rule for local paths and file:// URLs (source/allow.py); None: any path (the CLI's own).
    local_policy: LocalRepositories | None = None
    # --verify-commits: the commit must be signed by one of these keys before it is rendered (source/verify.py).
    verify: TrustedKeys | None = None


@dataclass
class PassOptions:
    namespace: str = "default"
    prune: bool = False
    allow_empty: bool = False
    dry_run: bool = False
    policy: ConflictPolicy = ConflictPolicy.REPORT
    wait: bool = False
    timeout: float = 300.0
    name: str | None = None  # ApplySet (inventory) name; derived from the source when not given
    inventory_namespace: str | None = None
    adopt_shared: bool = False  # take over objects that are members of another ApplySet
    prune_cascade: bool = False  # prune Namespaces/CRDs even when they hold objects prune does not remove
    cascade_advice: str = cascade.CASCADE_ADVICE  # how a refusal says to override it (a GitSync: its field)
    ignore: tuple[ignore.IgnoreRule, ...] = ()  # --ignore; the repository's .gitops-sync.yaml adds its own
    # `sync`: refuse a commit older than one the inventory records (a descendant of ours); --allow-rollback
    refuse_older: bool = False


def fetch_source(source: SourceOptions) -> Checkout:
    """The source's directory and commit (raises SourceError, RepositoryNotAllowed under its local policy)."""
    return fetch(
        source.repo,
        source.revision,
        source.path,
        cache_dir=source.cache_dir,
        timeout=source.timeout,
        local_policy=source.local_policy,
    )


def load(source: SourceOptions, cache: RenderCache | None = None) -> tuple[Checkout, list[DesiredObject]]:
    """Fetch and render; raises SourceError/RenderError before anything touches the cluster.

    `cache`: renders of a commit already rendered are served from it (gitops_sync.rendercache)."""
    checkout = fetch_source(source)
    if source.verify is not None:  # before the render: an unverified commit is never rendered nor applied
        checkout = replace(checkout, signer=verify_checkout(checkout, source.verify).describe())
    # The repository top (not --path) bounds symlinks and anchors relative --helm-values paths; a submodule
    # whose files are not there is never rendered as an empty directory.
    opts = replace(source.render, repo_root=checkout.repo_root or checkout.root, holes=checkout.holes)
    if cache is None:
        return checkout, render(checkout.root, opts)
    return checkout, cache.render(checkout, opts, render)


def disk_render_cache(source: SourceOptions) -> RenderCache:
    """The CLI's render cache: in the clone cache directory, next to the repositories' clones."""
    return RenderCache(DiskStore(cache_root(source.cache_dir) / "renders"))


def default_inventory_name(repo: str, path: str | None) -> str:
    """The inventory name of a source without --name: readable prefix + hash of its whole identity."""
    return identify(repo, path).inventory_name()


def inventory_of(checkout: Checkout, opts: PassOptions) -> tuple[str, str, str]:
    """(name, namespace, source identity) of the inventory a pass uses: for every report, even a failed one."""
    name = opts.name or source_identity(checkout).inventory_name()
    return name, opts.inventory_namespace or opts.namespace, source_identity(checkout).text


def source_identity(checkout: Checkout) -> SourceIdentity:
    """The identity `fetch` derived; for a Checkout built by hand, derived from its repo and sub-directory."""
    return checkout.identity or identify(checkout.repo, _sub_path(checkout))


class Engine:
    def __init__(
        self,
        client: Client,
        *,
        field_manager: str = FIELD_MANAGER,
        concurrency: int = 8,
        discovery: Discovery | None = None,
    ) -> None:
        self.client = client
        self.discovery = discovery or Discovery(client)
        self.manager = ResourceManager(client, self.discovery, field_manager=field_manager, concurrency=concurrency)
        self.field_manager = field_manager

    def resolve(self, objects: Sequence[DesiredObject], opts: PassOptions) -> list[Target]:
        """Needs discovery, so it is the first cluster access; keep the result for every pass of a revision."""
        self.discovery.ensure_loaded()  # the two discovery requests, here rather than inside a planner lookup
        return planner.resolve(objects, self.discovery, opts.namespace)

    def run(
        self,
        checkout: Checkout,
        all_targets: Sequence[Target],
        opts: PassOptions,
        *,
        apply: bool,
        live_of: Callable[[Sequence[Target]], LiveMap] | None = None,
        on_entry: OnEntry | None = None,
        only: set[ObjectKey] | None = None,
        on_ready: Callable[[ObjectKey], None] | None = None,
        refused: Mapping[ObjectKey, str] | None = None,
    ) -> ChangeSet:
        """Plan (apply=False or opts.dry_run) or converge. Per-object failures land in the change set.

        `refused` (a tenant's source: what its ServiceAccount may not read, with the refusal) are error
        entries planned without reading, diffing or sending them; they stay desired, so never pruned.

        `on_ready` hears of each object that becomes healthy during `--wait`.
        `only` narrows the pass to some objects (the daemon's per-object work items); such a partial
        pass never prunes and never rewrites the inventory, which need the whole picture.
        """
        dry_run = opts.dry_run or not apply
        identity = source_identity(checkout)
        name, inv_ns, identity_text = inventory_of(checkout, opts)
        cs = ChangeSet(
            revision=checkout.revision,
            signer=checkout.signer,
            source=_source_label(checkout),
            dry_run=dry_run,
            inventory=name,
            inventory_namespace=inv_ns,
            source_identity=identity_text,
        )
        targets = list(all_targets) if only is None else [t for t in all_targets if t.key in only]
        refused = refused or {}
        denied = [t for t in targets if t.key in refused]
        wanted = targets  # what prune keeps and the inventory records: the refused too
        targets = [t for t in targets if t.key not in refused]
        inv = inventory.load(self.client, name, inv_ns, identity_text, identity.inventory_name())
        if opts.refuse_older and not dry_run:
            _refuse_older(inv, checkout)
        legacy = None if opts.name else self._legacy(inv, checkout, identity, cs.source)
        live = (live_of or self.manager.fetch_live)(targets)
        ignored: dict[ObjectKey, list[Ignored]] = {}
        rules = ignore.rules_for(opts.ignore, checkout.root, checkout.repo_root)
        if rules:  # the apply bodies without what the rules leave to the cluster (copies: targets are reused)
            targets = [self._ignoring(t, live.get(t.key), rules, ignored) for t in targets]
        for t in targets:
            planner.finalize(t, live.get(t.key), inv.id, legacy.id if legacy else None)
        # Members of an old inventory of this very source being taken over are ours, not shared.
        shared, taken = self._shared(targets, live, {inv.id, *([legacy.id] if legacy else [])}, opts)
        group_kinds = {t.key.group_kind for t in wanted}
        namespaces = {t.key.namespace for t in wanted if t.key.namespace}
        old_kinds = inv.group_kinds | (legacy.group_kinds if legacy else set())
        old_namespaces = inv.namespaces | (legacy.namespaces if legacy else set())

        partial = only is not None
        record = not dry_run and bool(wanted) and not partial
        if record:
            # The parent records the union first, so a crash mid-pass never hides a member from prune: every
            # kind and namespace an apply is sent to (not the refused: nothing is sent for them).
            cs.entries += self._ensure_inventory_namespace(inv, targets, live, opts, on_entry)
            sent_kinds, sent_spaces = _kinds_and_namespaces(targets)
            self._record(inv, old_kinds | sent_kinds, old_namespaces | sent_spaces, checkout, cs.source)
        for t in targets:  # members of another ApplySet: left alone, reported as `shared` conflicts
            if t.key in shared:
                entry = planner.shared_entry(
                    t, live[t.key] or {}, shared[t.key], self.field_manager, dry_run=dry_run, identity=identity_text
                )
                self._add(cs, entry, on_entry)
        dying: set[ObjectKey] = set()
        for t in targets:  # being deleted: it will vanish whatever is applied now; re-created once gone
            pending = terminating(live.get(t.key), in_git=True)
            if pending is not None and t.key not in shared:
                dying.add(t.key)
                self._add(cs, terminating_entry(t, pending, dry_run=dry_run), on_entry)
        for t in targets:  # create-only objects that exist: never updated
            existing = live.get(t.key)
            if existing is not None and t.key not in shared and t.key not in dying and planner.is_create_only(t):
                self._add(cs, planner.create_only_entry(t, existing, self.field_manager, dry_run=dry_run), on_entry)
        for t in denied:  # nothing of the live object is read: the entry is the refusal alone
            entry = Entry(t.key, t.info.api_version, Action.ERROR, message=refused[t.key], origin=t.origin, **_DENIED)
            self._add(cs, entry, on_entry)
        done = {e.key for e in cs.entries}
        cs.entries += self.manager.apply_all(
            [t for t in targets if t.key not in done], live, policy=opts.policy, dry_run=dry_run, on_entry=on_entry
        )
        skipped = [e.message for e in cs.entries if e.message.startswith(NOT_ATTEMPTED)]
        if skipped:  # the API server went away (or the deadline passed) mid-pass: say so once, up top
            why = skipped[0].removeprefix(NOT_ATTEMPTED)
            cs.errors.append(
                Consequence(f"stopped early: {len(skipped)} of {len(targets)} object(s) not attempted: {why}")
            )
        if record:
            self._forget_refused(cs, inv, targets, old_kinds, old_namespaces, checkout)
        for e in cs.entries:
            e.ignored = ignored.get(e.key, [])
        _locate(cs.entries, wanted, checkout.root)
        for e in cs.entries:
            if e.key in taken and e.action is not Action.ERROR:
                verb = "would take" if dry_run else "took"
                e.message = f"{e.message}; {verb} it over from {taken[e.key].describe()} (adopted: prune releases it)"

        pruned_all = True
        kept: set[ObjectKey] = set()  # members `prune: disabled` keeps: still ours, so still recorded
        waiting_since = time.monotonic()  # --wait: one --timeout for held deletions and health together
        if opts.prune and not partial:
            pruned_all = self._prune(cs, [inv, *([legacy] if legacy else [])], wanted, opts, dry_run, on_entry, kept)
            if opts.wait and not dry_run:
                self._wait_deleted(cs, opts.timeout)
        # A deletion still pending (finalizers hold a member, or an object Git wants is going) leaves the
        # revision incomplete: not recorded as applied, and the inventory goes on recording what is there.
        if record and pruned_all and not cs.has_errors and not cs.has_pending:
            if legacy is not None:  # whatever still carries the old id moves into ours before it is retired
                self._adopt_legacy_members(cs, inv, legacy)
            # Shrink the recorded group-kinds only once every member outside them is gone; a kind the
            # server stopped serving stays recorded (with its namespaces): its members cannot be listed.
            # Only now is the revision recorded as applied.
            kinds, spaces = inv.group_kinds | group_kinds, inv.namespaces | namespaces
            if opts.prune:
                unserved = inventory.unserved_kinds(self.discovery, inv) - group_kinds
                if unserved:
                    log.info(
                        "keeping unserved kinds in the inventory until their members are gone", kinds=sorted(unserved)
                    )
                    namespaces = namespaces | inv.namespaces
                kinds = group_kinds | unserved | {k.group_kind for k in kept}
                spaces = namespaces | {k.namespace for k in kept if k.namespace}
            try:
                self._record(inv, kinds, spaces, checkout, cs.source, applied=True)
            except ClusterError as exc:
                cs.errors.append(f"applied, but the inventory could not record revision {checkout.revision}: {exc}")
            if legacy is not None and not cs.has_errors:
                self._retire(legacy, name)
        if opts.wait and not dry_run:
            left = max(0.0, opts.timeout - (time.monotonic() - waiting_since))
            self._wait(cs, [t for t in targets if t.key not in dying], left, on_ready)
        return cs

    def collect(
        self,
        name: str,
        namespace: str,
        identity: str,
        *,
        prune_cascade: bool = False,
        advice: str = cascade.CASCADE_ADVICE,
        keep_parent: bool = False,
        pending_done: bool = False,
    ) -> tuple[ChangeSet, bool]:
        """A deleted source's garbage collection: prune every member of its inventory, then the parent.

        Every guard of a prune holds (members only: objects of another ApplySet are not ours; adopted
        ones are released, not deleted; `prune: disabled` kept; the cascade guard, unless `prune_cascade`;
        `advice` ends its refusals). (change set, whether anything was due): nothing is due, and nothing
        is touched, when the inventory is absent or never recorded a clean pass (a source that never
        applied cleanly may have adopted what it only tried). `keep_parent`: the caller waits until the
        members are gone (`remaining`) and collects again to delete the parent; until then it finds them.
        A member finalizers hold (its deletion pending) keeps the parent, an error naming it (the caller
        retries), unless `keep_parent`, or `pending_done`: the API server accepted its deletion and nothing
        waits for it to finish (deletionPolicy Delete, MirrorPrune), so it counts as gone and the parent goes.
        """
        cs = ChangeSet(
            revision="",
            source="",
            dry_run=False,
            inventory=name,
            inventory_namespace=namespace,
            source_identity=identity,
        )
        inv = inventory.load(self.client, name, namespace, identity)
        if not inv.exists or not inv.recorded.get(conventions.APPLIED_REVISION):
            return cs, False
        opts = PassOptions(
            prune=True,
            allow_empty=True,
            name=name,
            inventory_namespace=namespace,
            prune_cascade=prune_cascade,
            cascade_advice=advice,
        )
        pruned_all = self._prune(cs, [inv], [], opts, False, None, parent_goes=True, pending_done=pending_done)
        unserved = inventory.unserved_kinds(self.discovery, inv)
        if unserved:  # their members cannot be listed: the parent is how they are found once served again
            cs.errors.append(
                f"inventory kept: it records kinds not served now ({', '.join(sorted(unserved))}); "
                "their members cannot be listed or pruned until the server serves them again"
            )
        held = [e for e in cs.entries if e.action is Action.TERMINATING]
        if held and not (keep_parent or pending_done):  # the parent is how the next attempt finds them
            cs.errors.append(f"inventory kept: {len(held)} member(s) not gone yet: {_held(held)}")
        if pruned_all and not cs.has_errors and not keep_parent:
            inventory.delete_parent(self.client, inv)
        return cs, True

    def remaining(self, name: str, namespace: str, identity: str) -> list[ObjectKey]:
        """The members of an inventory still in the API, but those `prune: disabled` keeps: what a deleted
        source whose deletion policy waits for termination waits for (deleted, held by their finalizers)."""
        inv = inventory.load(self.client, name, namespace, identity)
        if not inv.exists:
            return []
        members = inventory.list_members(self.client, self.discovery, inv)
        return sorted(k for k, m in members.items() if not planner.prune_disabled(m))

    def _ignoring(
        self,
        t: Target,
        live: Manifest | None,
        rules: Sequence[ignore.IgnoreRule],
        ignored: dict[ObjectKey, list[Ignored]],
    ) -> Target:
        applied = ignore.apply_rules(t.key, t.manifest, live, rules, self.field_manager)
        if applied.ignored:
            ignored[t.key] = applied.ignored
        return t if applied.manifest is t.manifest else replace(t, manifest=applied.manifest)

    def not_attempted(
        self, checkout: Checkout, targets: Sequence[Target], opts: PassOptions, exc: Exception, *, apply: bool
    ) -> ChangeSet:
        """The report of a pass the API server stopped before any object was sent: every target untouched."""
        cs = ChangeSet(revision=checkout.revision, source=_source_label(checkout), dry_run=opts.dry_run or not apply)
        cs.entries = [not_attempted_entry(t, exc) for t in targets]
        cs.errors.append(f"nothing applied or pruned: {exc}")
        return cs

    def _legacy(
        self, inv: inventory.Inventory, checkout: Checkout, identity: SourceIdentity, label: str
    ) -> inventory.Inventory | None:
        """The inventory versions before source identities made for this very source, to take over.

        Named by the old algorithm (repository's last element and --path) and taken only when its
        recorded source is provably this one: a URL or absolute path with our identity, or our very
        (relative) spelling with a recorded commit our repository has. Anything else stays untouched.
        """
        legacy_name = legacy_inventory_name(checkout.repo, _sub_path(checkout))
        if legacy_name == inv.name:
            return None
        old = inventory.find_legacy(self.client, legacy_name, inv.namespace)
        if old is None:
            return None
        recorded = old.recorded.get(conventions.SOURCE, "")
        if identity in label_identities(recorded):
            return old
        # Our spelling as recorded now, and as versions before source identities recorded it (`.//apps`).
        sub = _sub_path(checkout)
        spellings = {label, mask_url(checkout.repo) + (f"//{sub}" if sub else "")}
        spellings |= {x.rsplit("@", 1)[0] for x in spellings if checkout.ref}
        same_spelling = recorded in spellings or recorded.rsplit("@", 1)[0] in spellings
        recorded_revision = next(
            (old.recorded[k] for k in (conventions.REVISION, conventions.ATTEMPTED_REVISION) if old.recorded.get(k)), ""
        )
        revision = recorded_revision.removesuffix("-dirty")
        if same_spelling and (knows_commit(checkout.repo, revision) or (not revision and not checkout.revision)):
            return old
        log.warning(
            "an inventory of the old naming exists but is not provably this source's; leaving it alone",
            legacy=f"{old.namespace}/{old.name}",
            recorded_source=recorded,
            source=identity.text,
        )
        return None

    def _retire(self, legacy: inventory.Inventory, name: str) -> None:
        """Delete the old parent once everything moved; not while it records a kind the server does not
        serve now: those members cannot be listed or moved yet, and the old parent is how they are found."""
        unserved = inventory.unserved_kinds(self.discovery, legacy)
        where = f"{legacy.namespace}/{legacy.name}"
        if unserved:
            log.warning("old inventory kept: it records kinds not served now", legacy=where, kinds=sorted(unserved))
            return
        inventory.delete_parent(self.client, legacy)
        log.info("old inventory taken over", legacy=where, inventory=name)

    def _adopt_legacy_members(self, cs: ChangeSet, inv: inventory.Inventory, legacy: inventory.Inventory) -> None:
        """Members still labelled with the old inventory's id move into ours (label only), so a later --prune
        still finds them: those that left Git without --prune or kept by `prune: disabled`, and those in Git
        this pass did not apply (an existing create-only object, a skipped conflict). The applied ones moved."""
        try:
            left = list(inventory.list_members(self.client, self.discovery, legacy).values())
        except ClusterError as exc:  # the old parent stays (retired only on a clean pass): tried again next pass
            cs.errors.append(f"cannot list the members of the old inventory {legacy.name} to move them: {exc}")
            return
        cs.errors += self.manager.relabel(left, inv.id)

    def _record(
        self,
        inv: inventory.Inventory,
        kinds: set[str],
        namespaces: set[str],
        checkout: Checkout,
        source: str,
        *,
        applied: bool = False,
    ) -> None:
        inventory.save(
            self.client,
            inv,
            kinds,
            namespaces,
            field_manager=self.field_manager,
            revision=checkout.revision,
            source=source,
            applied=applied,
        )

    def _forget_refused(
        self,
        cs: ChangeSet,
        inv: inventory.Inventory,
        targets: Sequence[Target],
        old_kinds: set[str],
        old_namespaces: set[str],
        checkout: Checkout,
    ) -> None:
        """Take back what this pass recorded first and the API server then refused everywhere.

        A kind or namespace recorded for the first time by this pass (before its applies, for a crash's
        sake) whose every object was refused as a whole (403, 422, ...: `Entry.wrote_nothing`) holds nothing
        of this source: it was not recorded before, so no earlier pass left a member there, and this one
        stored none. Kept, it would make every later prune LIST it, and a LIST forbidden like the apply was
        would block the source for good once Git drops the object. Anything else (an object applied, an
        answer that may have landed, a record from before) stays recorded.
        """
        by_key = {e.key: e for e in cs.entries}
        kinds, spaces = _kinds_and_namespaces(targets)
        for t in targets:
            e = by_key.get(t.key)
            if e is None or not e.wrote_nothing:
                kinds.discard(t.key.group_kind)
                spaces.discard(t.key.namespace)
        kinds, spaces = kinds - old_kinds, spaces - old_namespaces - {inv.namespace}
        if not kinds and not spaces:
            return
        log.info(
            "not keeping in the inventory what only refused applies reached",
            kinds=sorted(kinds),
            namespaces=sorted(spaces),
        )
        try:
            self._record(inv, inv.group_kinds - kinds, inv.namespaces - spaces, checkout, cs.source)
        except ClusterError as exc:  # kept recorded: the next pass that is refused there again tries again
            log.warning("cannot update the inventory after refused applies", error=str(exc))

    def _ensure_inventory_namespace(
        self,
        inv: inventory.Inventory,
        targets: Sequence[Target],
        live: LiveMap,
        opts: PassOptions,
        on_entry: OnEntry | None,
    ) -> list[Entry]:
        """The parent ConfigMap needs its namespace: when Git creates that namespace, create it first."""
        first = [
            t
            for t in targets
            if t.key.kind == "Namespace" and not t.key.group and t.key.name == inv.namespace and live.get(t.key) is None
        ]
        if not first:
            return []
        return self.manager.apply_all(first, live, policy=opts.policy, on_entry=on_entry)

    def _shared(
        self, targets: Sequence[Target], live: LiveMap, own_ids: set[str], opts: PassOptions
    ) -> tuple[dict[ObjectKey, SharedWith], dict[ObjectKey, SharedWith]]:
        """Targets live as members of another ApplySet: (left alone, taken over by explicit opt-in)."""
        found = {t.key: (t, other) for t in targets if (other := planner.foreign_applyset(live.get(t.key), own_ids))}
        parents = {other: inventory.find_parent(self.client, other) for _t, other in found.values()}
        shared: dict[ObjectKey, SharedWith] = {}
        taken: dict[ObjectKey, SharedWith] = {}
        for key, (t, other) in found.items():
            (taken if opts.adopt_shared or planner.wants_adoption(t) else shared)[key] = parents[other]
        return shared, taken

    def _inv_ns(self, opts: PassOptions) -> str:
        return opts.inventory_namespace or opts.namespace

    def _prune(
        self,
        cs: ChangeSet,
        invs: Sequence[inventory.Inventory],
        targets: Sequence[Target],
        opts: PassOptions,
        dry_run: bool,
        on_entry: OnEntry | None,
        kept: set[ObjectKey] | None = None,
        *,
        parent_goes: bool = False,
        pending_done: bool = False,
    ) -> bool:
        """Prune the members that left Git; True when none was refused or failed. `kept` hears of the
        members `prune: disabled` keeps (still labelled ours: the inventory must go on recording them).

        A member whose deletion is pending (finalizers hold it) is no failure, but no member gone either
        (`cs.has_pending`): callers record the pass as complete only once it is gone. `parent_goes`: the
        caller deletes the inventory parent afterwards (a deleted source's collection), so members kept
        by `prune: disabled` do not need it; `pending_done`: a member held by finalizers counts as gone there
        (the Namespace holding the parent does not wait for it)."""
        if cs.has_errors:
            cs.errors.append(
                Consequence(
                    "prune not evaluated: some objects could not be planned"
                    if dry_run
                    else "prune skipped: some objects failed to apply; nothing is deleted on a failed pass"
                )
            )
            return False
        members: dict[ObjectKey, Manifest] = {}
        try:
            for inv in invs:  # ours, and an old inventory of this source being taken over
                if inv.exists:
                    members.update(inventory.list_members(self.client, self.discovery, inv))
        except ClusterError as exc:
            cs.errors.append(f"prune not attempted: cannot list the members of the inventory: {exc}")
            return False
        if not dry_run:  # members another pass applied since this one recorded (a newer revision's) stay
            for inv in invs:
                changed = inventory.changed_since(self.client, inv)
                if changed:
                    cs.errors.append(
                        f"prune skipped: the inventory ConfigMap {inv.namespace}/{inv.name} was written by another "
                        f"pass of this source since this one recorded it ({changed}); nothing is deleted against "
                        "a record that may be newer than this pass"
                    )
                    return False
        wanted = {t.key for t in targets}
        gone = [m for k, m in members.items() if k not in wanted]
        if not targets and gone and not opts.allow_empty:
            cs.errors.append(
                f"the source rendered zero objects: refusing to prune {len(gone)} object(s) "
                "(pass --allow-empty if the repository is meant to be empty)"
            )
            return False
        disabled = [m for m in gone if planner.prune_disabled(m)]
        for m in disabled:  # gitops-sync.io/prune: disabled
            entry = Entry(ObjectKey.of(m), str(m.get("apiVersion", "")), Action.UNCHANGED)
            entry.message = f"left Git; kept ({conventions.PRUNE}: {conventions.PRUNE_DISABLED})"
            self._add(cs, entry, on_entry)
            if kept is not None:
                kept.add(entry.key)
        gone = [m for m in gone if not planner.prune_disabled(m)]
        # The Namespace holding our inventory parent: deleting it deletes the parent with it (an adopted one is
        # only released: it stays, and so does the parent; one already Terminating is past saving: pending).
        parent = invs[0].parent_key
        holder = next(
            (m for m in gone if _holds(m, parent) and not planner.is_adopted(m) and not terminating(m, in_git=False)),
            None,
        )
        refused: list[Entry] = []
        if holder is not None:
            gone = [m for m in gone if m is not holder]
            remaining = len(targets) + (0 if parent_goes else len(disabled))
            if remaining:  # never, whatever --prune-cascade says: the record of those members would go
                refused.append(cascade.inventory_refusal(holder, parent, remaining))
        if not opts.prune_cascade:
            # A Namespace or CRD still holding objects this prune does not remove is not deleted.
            last = [holder] if holder is not None and not refused else []
            refused += cascade.refusals(
                self.client,
                self.discovery,
                [*gone, *last],
                parent=parent,
                ours=[_source_lease(parent)],
                advice=opts.cascade_advice,
            )
        for e in refused:
            self._add(cs, e, on_entry)
        blocked = {e.key for e in refused}
        gone = [m for m in gone if ObjectKey.of(m) not in blocked]
        entries = self.manager.prune(gone, dry_run=dry_run, on_entry=on_entry)
        if holder is not None and ObjectKey.of(holder) not in blocked:
            # The last member: the parent has nothing left to record, but it goes only after every other
            # member is gone, or one that failed or is still held would be forgotten with it.
            done = (Action.PRUNE, Action.TERMINATING) if pending_done else (Action.PRUNE,)
            if not refused and all(e.action in done for e in entries):
                entries += self.manager.prune([holder], dry_run=dry_run, on_entry=on_entry)
            else:
                entry = Entry(ObjectKey.of(holder), str(holder.get("apiVersion", "")), Action.UNCHANGED)
                entry.message = (
                    "left Git; kept until the other members are gone: it holds this source's inventory "
                    f"(ConfigMap {parent.namespace}/{parent.name})"
                )
                self._add(cs, entry, on_entry)
                if kept is not None:
                    kept.add(entry.key)
        cs.entries.extend(entries)
        # Held by a finalizer is pending, not left behind: reported as such (exit 1), never as a failure.
        pending = (Action.PRUNE, Action.TERMINATING)
        cs.prune_left = [e.key for e in [*refused, *entries] if e.action not in pending]
        return not cs.prune_left

    @staticmethod
    def _add(cs: ChangeSet, entry: Entry, on_entry: OnEntry | None) -> None:
        cs.entries.append(entry)
        if on_entry:
            on_entry(entry)

    def _wait_deleted(self, cs: ChangeSet, timeout: float) -> None:
        """`--wait`: a prune held by finalizers is done once the object is gone; still there at the
        timeout, it is an error naming what holds it, as a `--wait` timeout is."""
        held = [e for e in cs.entries if e.action is Action.TERMINATING and e.left_git]
        if not held:
            return
        started = time.monotonic()
        log.info("waiting until deleted", objects=len(held), timeout=timeout)
        try:
            still = self.manager.wait_deleted([(e.key, e.api_version) for e in held], timeout)
        except ClusterError as exc:
            cs.errors.append(f"wait for deletions abandoned after {time.monotonic() - started:.0f}s: {exc}")
            return
        took = time.monotonic() - started
        for e in held:
            if e.key not in still:
                e.action, e.terminating = Action.PRUNE, None
                e.message = f"deleted (left Git; gone after waiting {took:.1f}s for its finalizers)"
        if still:
            cs.errors.append(f"not deleted after {took:.0f}s: {_held([e for e in held if e.key in still])}")

    def _wait(
        self,
        cs: ChangeSet,
        targets: Sequence[Target],
        timeout: float,
        on_ready: Callable[[ObjectKey], None] | None = None,
    ) -> None:
        started = time.monotonic()
        log.info("waiting until healthy", objects=len(targets), timeout=timeout)
        try:
            not_ready = self.manager.wait(targets, timeout, on_ready=on_ready)
        except ClusterError as exc:
            cs.errors.append(f"wait abandoned after {time.monotonic() - started:.0f}s: {exc}")
            return
        by_key: dict[ObjectKey, str] = {r.key: f"{r.status.value}: {r.message}" for r in not_ready}
        for e in cs.entries:
            e.health = by_key.get(e.key, "Current") if e.action is not Action.PRUNE else ""
        if not_ready:
            names = "; ".join(f"{r.key} ({r.status.value}: {r.message})" for r in not_ready)
            cs.errors.append(f"not ready after {time.monotonic() - started:.0f}s: {names}")


def _refuse_older(inv: inventory.Inventory, checkout: Checkout) -> None:
    """A `sync` of a commit the inventory has seen superseded is refused before anything is written.

    Two pipelines of one repository finishing out of order would otherwise have the older one undo the
    newer one's changes and, with --prune, delete what it added."""
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


# A refused read (a tenant's ServiceAccount may not get the object) is the answer a request would have had.
_DENIED: dict[str, Any] = {"status": 403, "reason": "Forbidden"}


def _source_lease(parent: ObjectKey) -> ObjectKey:
    """The Lease a run of this source holds beside its inventory (cluster/lease.py: `sync`, the daemon's
    --leader-elect): ours, so it never makes the cascade guard refuse the Namespace they share."""
    name = lease_name(parent.name, parent.namespace, parent.namespace)
    return ObjectKey("coordination.k8s.io", "Lease", parent.namespace, name)


def _kinds_and_namespaces(targets: Sequence[Target]) -> tuple[set[str], set[str]]:
    """The group-kinds and namespaces of `targets`, as the inventory records them."""
    return {t.key.group_kind for t in targets}, {t.key.namespace for t in targets if t.key.namespace}


_ORIGIN = re.compile(r"^(?P<file>.+)#(?P<number>\d+)(?: items\[(?P<item>\d+)\])?$")


def _locate(entries: Sequence[Entry], targets: Sequence[Target], root: Path) -> None:
    """Where Git says each reported field: `file:line:column` for a plain YAML/JSON file (read again, only for
    objects with field entries), the file a tool rendered it from (kustomize origin, Helm `# Source:`), or at
    least the kustomization/chart directory."""
    by_key = {t.key: t for t in targets}
    cache: dict[tuple[str, int], locate.Positions] = {}
    for e in entries:
        fields = [*e.drift, *e.conflicts, *e.ignored]
        t = by_key.get(e.key)
        if not fields or t is None:
            continue
        found = _ORIGIN.match(t.origin)
        if t.source or found is None:
            for c in fields:
                c.source = t.source or t.origin
            continue
        rel, number = found["file"], int(found["number"])
        if (rel, number) not in cache:
            try:
                cache[(rel, number)] = locate.positions((root / rel).read_bytes(), number)
            except OSError:
                cache[(rel, number)] = {}
        base: tuple[locate.Segment, ...] = ("items", int(found["item"])) if found["item"] else ()
        for c in fields:
            c.source = _position(rel, cache[(rel, number)], base, c.path, t.manifest)


def _position(
    rel: str, positions: locate.Positions, base: tuple[locate.Segment, ...], path: str, desired: Manifest
) -> str:
    """`rel:line:column` of the field, else of its nearest ancestor Git writes, else `rel`.

    A printed path splits a dotted map key (`.metadata.labels.app.kubernetes.io/name`): it is re-joined as
    `desired` has it, or the position found would be the parent map's (its first key, lines early)."""
    segments: list[locate.Segment] = []
    try:
        elements = list(fieldpath.parse(path))
    except ValueError:
        elements = []
    for n in range(len(elements), 0, -1):  # the longest prefix Git sets, keys re-joined
        resolved = fieldpath.resolve(desired, fieldpath.Path(tuple(elements[:n])))
        if resolved is not None:
            elements = [*resolved, *elements[n:]]
            break
    for element in elements:
        if isinstance(element, fieldpath.Field):
            segments.append(element.name)
        elif isinstance(element, fieldpath.Index):
            segments.append(element.index)
        elif isinstance(element, fieldpath.Key) and len(element.items) == 1 and element.items[0][0] == "name":
            segments.append(("name", str(json.loads(element.items[0][1]))))
        else:
            break
    for n in range(len(segments), -1, -1):
        found = positions.get((*base, *segments[:n]))
        if found is not None:
            return f"{rel}:{found[0]}:{found[1]}"
    return rel


def _held(entries: Sequence[Entry], limit: int = 5) -> str:
    """`ConfigMap/ns/a (deletion pending: finalizer x); …`: what still holds the first few."""
    named = "; ".join(
        f"{e.key} ({e.terminating.describe() if e.terminating else 'terminating'})" for e in entries[:limit]
    )
    return named + (f" and {len(entries) - limit} more" if len(entries) > limit else "")


def _holds(member: Manifest, parent: ObjectKey) -> bool:
    """Whether `member` is the Namespace the inventory parent lives in."""
    key = ObjectKey.of(member)
    return key.kind == "Namespace" and not key.group and key.name == parent.namespace


def _sub_path(checkout: Checkout) -> str | None:
    """The rendered sub-directory (`--path`), normalised, or None for the repository top."""
    if checkout.repo_root is None or checkout.root == checkout.repo_root:
        return None
    return checkout.root.relative_to(checkout.repo_root).as_posix()


def _source_label(checkout: Checkout) -> str:
    return source_label(checkout.repo, _sub_path(checkout), checkout.ref)


def source_label(repo: str, sub: str | None, ref: str | None = None) -> str:
    """`url[//sub/dir][@ref]` (the kustomize spelling) for a remote; the joined, normalised path for a
    local one (`.` + `clusters/prod` is `clusters/prod`, never `.//clusters/prod`). Credentials masked."""
    sub = posixpath.normpath(sub.strip("/")) if sub and sub.strip("/") else ""
    sub = "" if sub == "." else sub
    if is_remote(repo):
        label = mask_url(repo.rstrip("/")) + (f"//{sub}" if sub else "")
    else:
        label = posixpath.normpath(posixpath.join(repo or ".", sub)) if sub else posixpath.normpath(repo or ".")
    return f"{label}@{ref}" if ref else label


__all__ = [
    "Engine",
    "PassOptions",
    "SourceOptions",
    "default_inventory_name",
    "fetch_source",
    "inventory_of",
    "load",
    "source_identity",
    "source_label",
]
