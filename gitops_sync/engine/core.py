"""The Engine: one pass over a source's targets (`run`), and a deleted source's collection (`collect`).

`run` builds a `PassState` and runs the phases of `phases.PHASES` over it; the change set it returns goes
to the CLI's report or to the daemon's reconciler (status, Events, metrics).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gitops_sync import conventions
from gitops_sync.apply import cascade, inventory
from gitops_sync.apply.manager import LiveMap, OnEntry, ResourceManager, not_attempted_entry
from gitops_sync.cluster.client import Client
from gitops_sync.cluster.discovery import Discovery
from gitops_sync.conventions import FIELD_MANAGER
from gitops_sync.engine import delete_hooks
from gitops_sync.engine.naming import checkout_label
from gitops_sync.engine.options import PassOptions
from gitops_sync.engine.phases import PHASES
from gitops_sync.engine.prune import Prune, describe_held
from gitops_sync.engine.state import PassState
from gitops_sync.plan import planner, policy
from gitops_sync.plan.changeset import Action, ChangeSet
from gitops_sync.plan.planner import Target
from gitops_sync.resource import DesiredObject, ObjectKey
from gitops_sync.source import Checkout


class Engine:
    def __init__(
        self,
        client: Client,
        *,
        field_manager: str = FIELD_MANAGER,
        concurrency: int = 8,
        discovery: Discovery | None = None,
        cluster_id: str = "",
    ) -> None:
        self.client = client
        # the kube-system UID of the cluster `client` reaches (cluster/connection.py): recorded on the
        # inventory parent, and a parent recording another cluster is never pruned from ("" unknown)
        self.cluster_id = cluster_id
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
        state = PassState.begin(
            checkout,
            all_targets,
            opts,
            apply=apply,
            live_of=live_of or self.manager.fetch_live,
            only=only,
            refused=refused,
            on_entry=on_entry,
            on_ready=on_ready,
        )
        for phase in PHASES:
            if state.stopped:
                break
            if phase.when(state):
                phase.run(self, state)
        return state.cs

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
        timeout: float = 300.0,
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
        The recorded Helm pre-delete hooks run first (one failing: nothing pruned), post-delete ones after a
        clean prune, each within `timeout` (engine/delete_hooks.py).
        """
        cs = ChangeSet(inventory=name, inventory_namespace=namespace, source_identity=identity)
        inv = inventory.load(self.client, name, namespace, identity, cluster_id=self.cluster_id)
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
        if delete_hooks.any_recorded(inv) and not delete_hooks.before_collect(self, cs, inv, timeout):
            return cs, True
        pruned_all = Prune(self, cs, [inv], opts, False, parent_goes=True, pending_done=pending_done).run([])
        if delete_hooks.any_recorded(inv) and pruned_all and not cs.has_errors:
            delete_hooks.after_collect(self, cs, inv, timeout, keep_parent=keep_parent)
        unserved = inventory.unserved_kinds(self.discovery, inv)
        if unserved:  # their members cannot be listed: the parent is how they are found once served again
            cs.errors.append(
                f"inventory kept: it records kinds not served now ({', '.join(sorted(unserved))}); "
                "their members cannot be listed or pruned until the server serves them again"
            )
        held = [e for e in cs.entries if e.action is Action.TERMINATING]
        if held and not (keep_parent or pending_done):  # the parent is how the next attempt finds them
            cs.errors.append(f"inventory kept: {len(held)} member(s) not gone yet: {describe_held(held)}")
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
        return sorted(k for k, m in members.items() if not policy.prune_disabled(m))

    def not_attempted(
        self, checkout: Checkout, targets: Sequence[Target], opts: PassOptions, exc: Exception, *, apply: bool
    ) -> ChangeSet:
        """The report of a pass the API server stopped before any object was sent: every target untouched."""
        cs = ChangeSet(revision=checkout.revision, source=checkout_label(checkout), dry_run=opts.dry_run or not apply)
        cs.charts = list(checkout.charts)
        cs.entries = [not_attempted_entry(t, exc) for t in targets]
        cs.errors.append(f"nothing applied or pruned: {exc}")
        return cs
