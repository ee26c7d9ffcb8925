"""The ResourceManager: the apply step of one pass, as the engine (and the daemon) hold it.

A facade over one module per verb, as Flux's `pkg/ssa` splits its manager: read live state (`live`),
apply or dry-run in stages (`apply`, with the client-side-apply takeover in `takeover`), prune
(`prune`), wait for health (`wait`). It holds what they share (client, discovery, field manager,
concurrency); the entries it returns go into the pass's change set (`plan.changeset`), which the
report and the daemon's status read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from gitops_sync.apply.apply import NOT_ATTEMPTED, Applier, OnEntry, not_attempted_entry
from gitops_sync.apply.live import CollectionSize, LiveMap, fetch_live
from gitops_sync.apply.prune import prune_members, relabel_members
from gitops_sync.apply.wait import WaitResult, wait_current, wait_gone
from gitops_sync.cluster.client import Client
from gitops_sync.cluster.discovery import Discovery
from gitops_sync.conventions import FIELD_MANAGER, ConflictPolicy
from gitops_sync.plan.changeset import Entry
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest, ObjectKey

__all__ = [
    "NOT_ATTEMPTED",
    "CollectionSize",
    "LiveMap",
    "OnEntry",
    "ResourceManager",
    "WaitResult",
    "not_attempted_entry",
]


class ResourceManager:
    def __init__(
        self,
        client: Client,
        discovery: Discovery,
        *,
        field_manager: str = FIELD_MANAGER,
        concurrency: int = 8,
    ) -> None:
        self.client = client
        self.discovery = discovery
        self.field_manager = field_manager
        self.concurrency = max(1, concurrency)

    def fetch_live(self, targets: Sequence[Target], *, sizes: CollectionSize | None = None) -> LiveMap:
        """Live state of every target (see `live.fetch_live`; `sizes`: how big each collection is, if known)."""
        return fetch_live(self.client, targets, concurrency=self.concurrency, sizes=sizes)

    def apply_all(
        self,
        targets: Sequence[Target],
        live: LiveMap,
        *,
        policy: ConflictPolicy = ConflictPolicy.REPORT,
        dry_run: bool = False,
        on_entry: OnEntry | None = None,
        wait_crds: float = 60.0,
    ) -> list[Entry]:
        """Plan (dry_run) or apply every target, stage by stage; never raises for one object's error."""
        applier = Applier(self.client, field_manager=self.field_manager, concurrency=self.concurrency)
        return applier.apply_all(targets, live, policy=policy, dry_run=dry_run, on_entry=on_entry, wait_crds=wait_crds)

    def prune(self, members: Iterable[Manifest], *, dry_run: bool, on_entry: OnEntry | None = None) -> list[Entry]:
        """Delete members that left Git; objects we adopted are released (label removed), not deleted."""
        return prune_members(
            self.client, self.discovery, members, dry_run=dry_run, concurrency=self.concurrency, on_entry=on_entry
        )

    def relabel(self, members: Iterable[Manifest], applyset_id: str) -> list[str]:
        """Move members of an inventory being taken over into `applyset_id` (label only); returns errors."""
        return relabel_members(self.client, self.discovery, members, applyset_id, concurrency=self.concurrency)

    def wait(
        self,
        targets: Sequence[Target],
        timeout: float,
        interval: float = 0.5,
        *,
        on_ready: Callable[[ObjectKey], None] | None = None,
    ) -> list[WaitResult]:
        """Poll until every target is Current (kstatus rules); returns the ones that are not."""
        return wait_current(self.client, targets, timeout, interval, concurrency=self.concurrency, on_ready=on_ready)

    def wait_deleted(
        self, objects: Sequence[tuple[ObjectKey, str]], timeout: float, interval: float = 0.5
    ) -> set[ObjectKey]:
        """Poll until each (key, apiVersion) is gone; returns the ones still Terminating (see `wait.wait_gone`)."""
        paths = {}
        for key, api_version in objects:
            info = self.discovery.lookup(api_version, key.kind)
            if info is not None:  # a kind no longer served: nothing of it can be read, or be left
                paths[key] = info.path(key.namespace or None, key.name)
        return wait_gone(self.client, paths, timeout, interval, concurrency=self.concurrency)
