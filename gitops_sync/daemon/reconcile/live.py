"""The picture of the cluster one pass plans against: live reads, and the fields left to others.

`LiveReads` reads the live objects of a pass from the watch cache (API reads for what the cache calls
absent); `PassYields` drops the fields this source yields (to a fight's winner, to an autoscaler) from
the pass's targets. Both are parts of `SourceReconciler` (reconciler.py), which runs the pass with them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from gitops_sync.apply.manager import LiveMap
from gitops_sync.cluster.client import Client
from gitops_sync.daemon.reconcile.desired import DesiredState, SourceSpec
from gitops_sync.daemon.reconcile.history import OwnershipHistory
from gitops_sync.daemon.reconcile.reporter import Reporter
from gitops_sync.daemon.reconcile.yields import Yields
from gitops_sync.engine import Engine
from gitops_sync.errors import ClusterError
from gitops_sync.formatting import rfc3339
from gitops_sync.log import get_logger
from gitops_sync.plan.autoscaler import Autoscaler, find_autoscaler, scaled_by_controller_manager
from gitops_sync.plan.changeset import LIVE_CHANGED, Entry
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest, ObjectKey

log = get_logger("gitops_sync.daemon")


class _CacheReads(Protocol):
    def live_of(self, targets: Sequence[Target], fallback: Callable[[Sequence[Target]], LiveMap]) -> LiveMap: ...

    def collection_size(self, target: Target) -> int | None: ...


class LiveReads:
    """Live state for a pass: needs `engine` (API reads) and `cache` (the watch cache)."""

    engine: Engine
    cache: _CacheReads

    def _live_of(self, targets: Sequence[Target]) -> LiveMap:
        """Live state from the watch cache; what the cache calls absent is read again from the API.

        A lagging cache would plan an existing object as a create: it could not be told apart as a
        member of another ApplySet (`shared`), nor as existing before us (the apply's answer still marks
        it adopted). Absent objects are rare (new in Git, deleted out of band), so this costs little, as
        long as it reads them one by one where their namespace is crowded (`_read_live`): on a cold start
        every object is absent, and a LIST of a namespace shared by N sources per source is O(N^2).
        """
        fresh: set[ObjectKey] = set()

        def read(ts: Sequence[Target]) -> LiveMap:
            fresh.update(t.key for t in ts)
            return self._read_live(ts)

        live = self.cache.live_of(targets, read)
        doubtful = [t for t in targets if live.get(t.key) is None and t.key not in fresh]
        if doubtful:
            live.update(self._read_live(doubtful))
        return live

    def _read_live(self, targets: Sequence[Target]) -> LiveMap:
        """API reads for what the cache cannot answer (a refused read plans that one object as absent): a LIST
        of a collection only where the cache does not count it many times bigger than the targets, else GETs."""
        return self.engine.manager.fetch_live(targets, sizes=self.cache.collection_size)


class PassYields:
    """The targets of a pass with the fields this source yields left out, and when a live change was made.

    Runs on the source's pass thread only (passes of one source never overlap)."""

    def __init__(
        self,
        spec: SourceSpec,
        yields: Yields,
        history: OwnershipHistory,
        reporter: Reporter,
        *,
        refused: Callable[[], Mapping[ObjectKey, str]],
        active: Callable[[], bool],
        api: Client,
    ) -> None:
        self.spec = spec
        self.yields = yields
        self.history = history
        self.reporter = reporter
        self._refused = refused
        self.active = active
        self.api = api

    def targets(self, src: DesiredState, only: set[ObjectKey] | None, live_map: LiveMap) -> list[Target]:
        """The targets of this pass with yielded fields left out (yields.py): end the yields that
        expired or whose HPA is gone, yield to autoscalers seen for the first time, then drop the fields."""
        for y in self.yields.expired():
            self.reporter.resumed(
                y,
                f"{y.manager} has not written it for {self.spec.fight_window:g} s",
                src.by_key[y.key].info.api_version,
                self.active(),
            )
        scope = src.scope(only)
        hpas: dict[str, list[Manifest] | None] = {}
        refused = self._refused()
        autoscaled = self.yields.autoscaled_keys()
        for t in scope:
            live = None if t.key in refused else live_map.get(t.key)
            if live is None or not self.spec.autoscaler_wins:
                continue
            if self.yields.suppressed(t.key):
                self.yields.settle(t.key, live)
            scaled = scaled_by_controller_manager(live)
            if t.key in autoscaled:
                if only is None:  # a full pass checks the HPA is still there
                    known, hpa = self._autoscaler_of(t.key, hpas)
                    if known and hpa is None:
                        for y in self.yields.autoscaler_gone(t.key):
                            self.reporter.resumed(
                                y, "no HorizontalPodAutoscaler scales it any more", t.info.api_version, self.active()
                            )
                continue
            if not scaled:
                continue
            _known, hpa = self._autoscaler_of(t.key, hpas)
            if hpa is None:
                continue  # no HPA (deleted, or not readable): an old owner entry is not a reason to yield
            for y in self.yields.for_autoscaler(t, live, hpa):
                if self.active():
                    self.reporter.yielded(y, live)
        # A partial pass hands the engine its own targets only: the engine's pick of `only` among every
        # target was a walk of all of them for each pass of a few objects.
        if not any(self.yields.has(t.key) for t in scope):
            return scope
        return [self.yields.body(t, live_map.get(t.key)) for t in scope]

    def since_from_history(self, e: Entry) -> None:
        """A live-changed field whose writer's managedFields entry has no time (the scale subresource records
        none): when the watch saw that manager write it (the ownership history)."""
        missing = [c for c in e.drift + e.conflicts if c.reason == LIVE_CHANGED and not c.since]
        if not missing:
            return
        records = self.history.fields(e.key)
        for c in missing:
            seen = [r for r in records.get(c.path, ()) if r.manager == c.manager]
            if seen:
                c.since = rfc3339(seen[-1].observed)

    def _autoscaler_of(self, key: ObjectKey, hpas: dict[str, list[Manifest] | None]) -> tuple[bool, Autoscaler | None]:
        """(known, the HPA scaling `key`): the namespace's HPAs are listed once per pass; a refused or
        failed list is unknown (never a reason to yield, nor to resume)."""
        if key.namespace not in hpas:
            try:
                path = f"/apis/autoscaling/v2/namespaces/{key.namespace}/horizontalpodautoscalers"
                doc = self.api.get(path)
                hpas[key.namespace] = list(doc.get("items") or [])
            except ClusterError as exc:
                log.info("cannot list HorizontalPodAutoscalers", namespace=key.namespace, error=str(exc))
                hpas[key.namespace] = None
        items = hpas[key.namespace]
        if items is None:
            return False, None
        return True, find_autoscaler(key, items)


def from_picture(picture: LiveMap, targets: Sequence[Target], read: Callable[[Sequence[Target]], LiveMap]) -> LiveMap:
    """The pass's live objects from its one picture (`read` for any target the picture lacks)."""
    out = {t.key: picture[t.key] for t in targets if t.key in picture}
    rest = [t for t in targets if t.key not in picture]
    if rest:
        out.update(read(rest))
    return out


__all__ = ["LiveReads", "PassYields", "from_picture"]
