"""A list-then-watch cache of the kinds the daemon manages, one loop per kind (and namespace).

Each loop lists (remembering the list's resourceVersion), then watches from it with bookmarks, and
keeps the last resourceVersion it saw. A watch the server ends after its timeout is resumed from
there; a 410 Gone (the version was compacted away) or a broken connection leads to a fresh list,
after a backoff when it was an error. The kubernetes client's own watch cannot resume, hence this.

Objects Git wants are kept whole; other objects of the same kinds are kept as "exists" markers only
(no Secret of the whole cluster in memory). `live_of` answers from the cache where a loop is synced
and falls back to API reads where it is not, so a pass is never wrong, only sometimes slower.

When the ServiceAccount may not list a kind cluster-wide (namespaced RBAC), the cluster-wide loop gets
a 403 and is replaced by one loop per namespace that holds desired objects.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitops_sync.apply.manager import LiveMap
from gitops_sync.cluster.client import Client
from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.daemon.runtime import kept
from gitops_sync.daemon.runtime.listwatch import BACKOFF, STOP, Callbacks, ListWatch, Retry
from gitops_sync.daemon.runtime.queue import Backoff
from gitops_sync.errors import ForbiddenError
from gitops_sync.log import get_logger
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest, ObjectKey, resource_version

log = get_logger(__name__)


class EventType(enum.StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    LISTED = "LISTED"  # seen in the first list of a loop (baseline, not a change)
    RECOVERED = "RECOVERED"  # a loop is synced again after an error: anything may have been missed


# (type, key, object or None when deleted/recovered). Called on a cache thread: must return quickly.
OnEvent = Callable[[EventType, ObjectKey | None, Manifest | None], None]
OnRestart = Callable[[str, str], None]  # (resource, reason)
_Change = tuple[EventType, ObjectKey, Manifest | None]


@dataclass(frozen=True)
class UnitId:
    group: str
    kind: str
    namespace: str | None  # None: all namespaces (or a cluster-scoped kind)

    def __str__(self) -> str:
        gk = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{gk} in {self.namespace}" if self.namespace else gk


_KEEP = object()  # store marker: the object exists, its body is not kept (nobody wants it)


class _Unit:
    """One list+watch loop (a `ListWatch`) and the objects it has seen."""

    def __init__(self, cache: WatchCache, uid: UnitId, info: ResourceInfo) -> None:
        self.cache = cache
        self.id = uid
        self.info = info
        self.objects: dict[ObjectKey, Any] = {}  # Manifest or _KEEP
        self.per_namespace: Counter[str] = Counter()  # how many of `objects` each namespace holds ("": cluster)
        self.state = "starting"  # starting | synced | error | forbidden | stopped
        self.error = ""
        self.synced_once = False
        # The first list's objects have all been handed to on_event (the history's baseline). Until then a
        # watch event waits behind them: at 20,000 objects that took seconds after "synced", and the changes
        # made just after /readyz said ready were reported 3 s late (bench case 6). Never reset: a relist
        # keeps serving, as before.
        self.baseline_done = False
        self.loop = ListWatch(
            cache.client,
            info.path(uid.namespace),
            Callbacks(listed=self._listed, changed=self._changed, restarted=self._restarted, failed=self._failed),
            name=str(uid),
            api_version=info.api_version,
            kind=info.kind,
            backoff=Backoff(cache.backoff_base, cache.backoff_cap, jitter=0.2),
            watch_timeout=cache.watch_timeout,
        )
        self.thread = threading.Thread(target=self._run, name=f"watch {uid}", daemon=True)

    @property
    def synced(self) -> bool:
        return self.state == "synced"

    @property
    def stopping(self) -> bool:
        return self.loop.stopped

    @property
    def rv(self) -> str:
        return self.loop.resource_version

    def status(self) -> dict[str, Any]:
        return {
            "resource": str(self.id),
            "apiVersion": self.info.api_version,
            "state": self.state,
            "resourceVersion": self.rv,
            "objects": len(self.objects),
            "restarts": self.loop.restarts,
            "error": self.error,
        }

    def _run(self) -> None:
        self.loop.run()
        self.state = "stopped"

    # -- what the loop found ----------------------------------------------------------------

    def _failed(self, exc: Exception) -> Retry:
        if isinstance(exc, ForbiddenError):
            if self.cache.forbidden(self, exc):
                return STOP  # replaced by per-namespace loops
            self._note_failure("forbidden", exc)
            return Retry(after=self.cache.forbidden_retry)
        self._note_failure("error", exc)
        return BACKOFF

    def _note_failure(self, state: str, exc: BaseException) -> None:
        first = self.state != state or self.error != str(exc)
        self.state, self.error = state, str(exc)
        if first:
            log.warning("watch failed; relisting after a backoff", resource=str(self.id), error=str(exc))

    def _restarted(self, reason: str) -> None:
        self.cache.on_restart(str(self.id), reason)

    def _listed(self, listing: list[Manifest], rv: str) -> None:
        items = {self._key(item): item for item in listing}
        for key, item in items.items():
            self.cache.compact(key, item)
        recovered = self.synced_once
        changes = self.cache.replace(self, items)
        self.loop.resource_version = rv
        self.state, self.error = "synced", ""
        first = not self.synced_once
        self.synced_once = True
        self.cache.notify_synced()
        if first:
            log.info("watch cache synced", resource=str(self.id), objects=len(items), resource_version=rv)
        for etype, key, obj in changes:
            self.cache.emit(EventType.LISTED if first else etype, key, obj)
        if recovered:
            self.cache.emit(EventType.RECOVERED, None, None)
        if first:
            self.baseline_done = True
            self.cache.notify_synced()

    def _changed(self, etype: str, obj: Manifest) -> None:
        key = self._key(obj)
        if etype != "DELETED":
            self.cache.compact(key, obj)
        self.cache.apply_event(self, EventType(etype), key, None if etype == "DELETED" else obj)

    def _key(self, obj: Manifest) -> ObjectKey:
        meta = obj.get("metadata") or {}
        ns = str(meta.get("namespace") or "") if self.info.namespaced else ""
        return ObjectKey(self.info.group, self.info.kind, ns, str(meta.get("name", "")))


class WatchCache:
    """Owns the loops; `set_interest` says which objects Git wants, `live_of` answers the planner."""

    def __init__(
        self,
        client: Client,
        *,
        on_event: OnEvent,
        on_restart: OnRestart | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 8.0,
        forbidden_retry: float = 60.0,
        watch_timeout: tuple[int, int] = (240, 360),
    ) -> None:
        self.client = client
        self._on_event = on_event
        self._on_restart = on_restart
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.forbidden_retry = forbidden_retry
        self.watch_timeout = watch_timeout
        self._lock = threading.RLock()
        self._synced = threading.Condition(self._lock)
        self._units: dict[UnitId, _Unit] = {}
        self._interest: dict[ObjectKey, Target] = {}
        # loop -> {apiVersion: (how many targets of the interest want it, its info)}
        self._wants: dict[UnitId, dict[str, tuple[int, ResourceInfo]]] = {}
        self._namespaced_only: set[tuple[str, str]] = set()  # (group, kind) refused cluster-wide
        self._stopped = False

    # -- interest ---------------------------------------------------------------------------

    def set_interest(self, targets: Sequence[Target] | Mapping[ObjectKey, Target]) -> None:
        """Watch what these targets need; stop loops nobody needs any more."""
        new = dict(targets) if isinstance(targets, Mapping) else {t.key: t for t in targets}
        with self._lock:
            self.change_interest(
                {k: t for k, t in new.items() if self._interest.get(k) is not t}, self._interest.keys() - new.keys()
            )

    def change_interest(self, added: Mapping[ObjectKey, Target], removed: Iterable[ObjectKey]) -> None:
        """Watch these targets too (a target given again for a key replaces it), and no longer `removed`.

        Costs what changed, not the whole interest: the fleet tells each source's load (at 2,000 sources of
        10 objects, a recount of all 20,000 made the cold start O(N^2): ~66 ms per load)."""
        with self._lock:
            touched: set[UnitId] = set()
            for k in removed:
                gone = self._interest.pop(k, None)
                if gone is not None:
                    touched.add(self._count(gone, -1))
            for k, t in added.items():
                before = self._interest.get(k)
                self._interest[k] = t
                if before is None or before.info.api_version != t.info.api_version:
                    if before is not None:
                        touched.add(self._count(before, -1))
                    touched.add(self._count(t, +1))
            self._sync_units(touched)

    def _uid(self, t: Target) -> UnitId:
        if t.info.namespaced and (t.key.group, t.key.kind) in self._namespaced_only:
            return UnitId(t.key.group, t.key.kind, t.key.namespace)
        return UnitId(t.key.group, t.key.kind, None)

    def _count(self, t: Target, delta: int) -> UnitId:
        """How many targets of the interest each loop serves, by apiVersion (with that version's info)."""
        uid = self._uid(t)
        versions = self._wants.setdefault(uid, {})
        count, info = versions.get(t.info.api_version, (0, t.info))
        if count + delta > 0:
            versions[t.info.api_version] = (count + delta, info)
        else:
            versions.pop(t.info.api_version, None)
            if not versions:
                del self._wants[uid]
        return uid

    def _recount(self) -> None:
        """Count the whole interest again (a kind switched to per-namespace loops: every UnitId of it moves)."""
        self._wants = {}
        for t in self._interest.values():
            self._count(t, +1)
        self._sync_units(set(self._units) | set(self._wants))

    def _sync_units(self, uids: set[UnitId]) -> None:
        """Start the loops these targets need, stop those nobody needs; a loop keeps its apiVersion while a
        target wants it, else it restarts with a version one does."""
        if self._stopped:
            return
        for uid in uids:
            versions = self._wants.get(uid, {})
            unit = self._units.get(uid)
            if unit is not None and unit.info.api_version in versions:
                continue
            if unit is not None:
                unit.loop.stop()
                del self._units[uid]
            if versions:
                _count, info = next(iter(versions.values()))
                unit = _Unit(self, uid, info)
                self._units[uid] = unit
                unit.thread.start()

    def forbidden(self, unit: _Unit, exc: ForbiddenError) -> bool:
        """A cluster-wide loop was refused: switch the kind to per-namespace loops. True if replaced."""
        with self._lock:
            if unit.id.namespace is not None or not unit.info.namespaced:
                return False
            log.info("no cluster-wide access; watching per namespace", resource=str(unit.id), error=str(exc))
            self._namespaced_only.add((unit.id.group, unit.id.kind))
            unit.state = "stopped"
            self._recount()
            return True

    # -- called by the loops ----------------------------------------------------------------

    def _keep(self, key: ObjectKey, obj: Manifest) -> Any:
        return obj if key in self._interest else _KEEP

    def compact(self, key: ObjectKey, obj: Manifest) -> None:
        """A body the cache will keep (until the next event of it) shares its short strings and identical
        managedFields entries with the rest (`kept.compact`; what is kept and why: runtime/kept.py). On the
        loop's thread, before the lock: a racy look at the interest costs at most a wasted walk of an object
        that is then not kept."""
        if key in self._interest:
            kept.compact(obj)

    def replace(self, unit: _Unit, items: dict[ObjectKey, Manifest]) -> list[_Change]:
        """A fresh list: swap the unit's objects, return the interesting changes since the last one."""
        with self._lock:
            if unit.stopping:
                return []
            old = unit.objects
            unit.objects = {k: self._keep(k, v) for k, v in items.items()}
            unit.per_namespace = Counter(k.namespace for k in items)
            changes: list[_Change] = []
            for key, obj in items.items():
                if key not in self._interest:
                    continue
                before = old.get(key)
                if before is None:
                    changes.append((EventType.ADDED, key, obj))
                elif before is _KEEP or resource_version(before) != resource_version(obj):
                    changes.append((EventType.MODIFIED, key, obj))
            for key in old.keys() - items.keys():
                if key in self._interest:
                    changes.append((EventType.DELETED, key, None))
            return changes

    def apply_event(self, unit: _Unit, etype: EventType, key: ObjectKey, obj: Manifest | None) -> None:
        with self._lock:
            if unit.stopping:
                return
            if obj is None:
                if unit.objects.pop(key, None) is not None:
                    unit.per_namespace[key.namespace] -= 1
                    if unit.per_namespace[key.namespace] <= 0:
                        del unit.per_namespace[key.namespace]
            else:
                if key not in unit.objects:
                    unit.per_namespace[key.namespace] += 1
                unit.objects[key] = self._keep(key, obj)
            interesting = key in self._interest
        if interesting:
            self.emit(etype, key, obj)

    def emit(self, etype: EventType, key: ObjectKey | None, obj: Manifest | None) -> None:
        try:
            self._on_event(etype, key, obj)
        except Exception:  # the loop must survive a failing handler
            log.exception("watch event handler failed", key=str(key))

    def on_restart(self, resource: str, reason: str) -> None:
        if self._on_restart is not None:
            self._on_restart(resource, reason)

    def notify_synced(self) -> None:
        with self._lock:
            self._synced.notify_all()

    # -- reading ----------------------------------------------------------------------------

    def _unit_for(self, key: ObjectKey) -> _Unit | None:
        return self._units.get(UnitId(key.group, key.kind, None)) or self._units.get(
            UnitId(key.group, key.kind, key.namespace)
        )

    def get(self, key: ObjectKey) -> tuple[bool, Manifest | None]:
        """(known, object): known=False when no synced loop can say whether the object exists."""
        with self._lock:
            unit = self._unit_for(key)
            if unit is None or not unit.synced:
                return False, None
            obj = unit.objects.get(key)
            if obj is _KEEP:
                return False, None
            return True, obj

    def collection_size(self, target: Target) -> int | None:
        """How many objects of the target's kind its namespace holds (cluster-scoped: all of them), as far as a
        synced loop knows; None when none covers it. Lets API reads choose GETs over a LIST of a crowded
        namespace (apply/live.py); a count a few events behind changes only that choice, never an answer."""
        key = target.key
        with self._lock:
            unit = self._unit_for(key)
            if unit is None or not unit.synced:
                return None
            return unit.per_namespace[key.namespace]

    def live_of(self, targets: Sequence[Target], fallback: Callable[[Sequence[Target]], LiveMap]) -> LiveMap:
        """Live objects for the planner: cached where known, `fallback` (API reads) for the rest."""
        live: LiveMap = {}
        missing: list[Target] = []
        for t in targets:
            known, obj = self.get(t.key)
            if known and (obj is None or obj.get("apiVersion") == t.info.api_version):
                live[t.key] = obj
            else:
                missing.append(t)
        if missing:
            live.update(fallback(missing))
        return live

    def is_synced(self) -> bool:
        """Every loop has listed at least once, handed that list on, and is not failing (a forbidden namespace
        counts as done). Reads (`get`) are served as soon as a loop has listed."""
        with self._lock:
            return all((u.synced and u.baseline_done) or u.state == "forbidden" for u in self._units.values())

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self.is_synced():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._synced.wait(min(left, 0.1))
            return True

    def status(self) -> list[dict[str, Any]]:
        with self._lock:
            return [u.status() for u in sorted(self._units.values(), key=lambda u: str(u.id))]

    def objects(self) -> int:
        with self._lock:
            return sum(len(u.objects) for u in self._units.values())

    def dead(self) -> str:
        """Loops whose thread ended although nobody stopped them ("" when none): for the supervisor."""
        with self._lock:
            gone = [
                str(u.id)
                for u in self._units.values()
                if not u.thread.is_alive() and not u.stopping and u.state != "stopped" and u.thread.ident is not None
            ]
        return f"watch loops ended: {', '.join(sorted(gone))}" if gone else ""

    def revive(self) -> None:
        """Start a new thread for each dead loop; it lists again, so nothing missed stays missed."""
        with self._lock:
            for u in self._units.values():
                if not u.thread.is_alive() and not u.stopping and u.thread.ident is not None:
                    log.warning("restarting a watch loop that ended", resource=str(u.id))
                    u.thread = threading.Thread(target=u._run, name=u.thread.name, daemon=True)
                    u.thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for unit in self._units.values():
                unit.loop.stop()

    def __iter__(self) -> Iterator[UnitId]:
        with self._lock:
            return iter(list(self._units))
