"""The ResourceManager: read live state, apply (or dry-run) in stages, delete, wait.

Every write is a server-side apply under our field manager. A `diff` is the same code path with
`dryRun=All`, so what `diff` promises is what `sync` does.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import structlog

from gitops_sync.apply import ordering
from gitops_sync.cluster.client import APPLY_PATCH, JSON_PATCH, Client
from gitops_sync.cluster.discovery import Discovery
from gitops_sync.conventions import ADOPTED, FIELD_MANAGER, INTENT_HASH, PART_OF, ConflictPolicy
from gitops_sync.errors import (
    ApiError,
    ApiTimeoutError,
    ApiUnavailableError,
    ClusterError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    UnauthorizedError,
)
from gitops_sync.health import Status, assess
from gitops_sync.plan import ownership
from gitops_sync.plan.changeset import Action, Entry
from gitops_sync.plan.planner import (
    Target,
    after_takeover,
    explain,
    has_client_side_apply,
    is_bookkeeping_conflict,
    is_client_side_apply,
    is_client_side_apply_entry,
    is_unchanged,
    mark_adopted,
    without_conflicts,
)
from gitops_sync.resource import Manifest, ObjectKey

log = structlog.get_logger(__name__)

_T = TypeVar("_T")
_R = TypeVar("_R")
LiveMap = dict[ObjectKey, Manifest | None]
OnEntry = Callable[[Entry], None]

# The message prefix of an object no request was sent for: it is exactly as it was before the pass.
NOT_ATTEMPTED = "not attempted: "
# Collections with at least this many targets are read with one LIST instead of a GET each.
_LIST_THRESHOLD = 4


@dataclass
class WaitResult:
    key: ObjectKey
    status: Status
    message: str


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

    # -- reading ----------------------------------------------------------------------------

    def fetch_live(self, targets: Sequence[Target]) -> LiveMap:
        """Live state of every target: one LIST per busy collection, GETs for the rest, concurrently.

        A refused LIST falls back to GETs; a refused GET leaves that one object absent.
        """
        by_collection: dict[str, list[Target]] = defaultdict(list)
        for t in targets:
            by_collection[t.collection].append(t)
        live: LiveMap = {t.key: None for t in targets}

        def read(collection: str) -> None:
            group = by_collection[collection]
            if len(group) >= _LIST_THRESHOLD:
                try:
                    items = self.client.list_collection(collection).items
                except ForbiddenError:
                    pass
                else:
                    wanted = {t.key.name: t for t in group}
                    for item in items:
                        t = wanted.get((item.get("metadata") or {}).get("name", ""))
                        if t is not None:
                            item.setdefault("apiVersion", t.info.api_version)
                            item.setdefault("kind", t.key.kind)
                            live[t.key] = item
                    return
            for t in group:
                try:
                    live[t.key] = self.client.get_or_none(t.path)
                except (UnauthorizedError, ForbiddenError) as exc:
                    # Namespaced RBAC: plan the object as absent, so its apply fails with the server's own
                    # message in its entry while every other object converges.
                    log.info("read refused; planning as absent", object=str(t.key), error=str(exc))

        self._each(read, list(by_collection))
        return live

    # -- applying ---------------------------------------------------------------------------

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
        entries: list[Entry] = []
        new_namespaces = {t.key.name for t in targets if t.key.kind == "Namespace" and live.get(t.key) is None}
        new_crds = {
            _crd_group_kind(t.manifest)
            for t in targets
            if t.key.kind == "CustomResourceDefinition" and live.get(t.key) is None
        }
        for index, stage in enumerate(ordering.stages(targets, lambda t: t.key)):
            if not stage:
                continue

            def one(t: Target) -> Entry:
                pending = _pending_reason(t, new_namespaces, new_crds) if dry_run else ""
                return self._apply_one(t, live.get(t.key), policy=policy, dry_run=dry_run, pending=pending)

            # The fast path sends nothing: pure CPU, done here rather than on the pool, where thousands of
            # tiny tasks only fight over the GIL. The pool gets the objects that need a request.
            quick = [self._if_unchanged(t, live.get(t.key), dry_run=dry_run) for t in stage]
            if on_entry:
                for e in quick:
                    if e is not None:
                        on_entry(e)
            sent = iter(self._each(one, [t for t, e in zip(stage, quick, strict=True) if e is None], on_entry))
            entries.extend(e if e is not None else next(sent) for e in quick)
            if index == 0 and not dry_run:
                self._wait_crds_established([t for t in stage if t.key.kind == "CustomResourceDefinition"], wait_crds)
        return entries

    def _if_unchanged(self, t: Target, live: Manifest | None, *, dry_run: bool) -> Entry | None:
        """The entry of an object provably unchanged (see `is_unchanged`), without a request; else None."""
        if is_unchanged(t, live):
            log.debug(
                "decided",
                object=str(t.key),
                action="unchanged",
                why="live carries this intent hash and every field Git sets holds its value: no request",
            )
            return explain(t, live, live, self.field_manager, dry_run=dry_run)
        return None

    def _apply_one(
        self, t: Target, live: Manifest | None, *, policy: ConflictPolicy, dry_run: bool, pending: str = ""
    ) -> Entry:
        """An object the fast path could not settle: ask the server (dry run or apply)."""
        entry = self._ask_server(t, live, policy=policy, dry_run=dry_run, pending=pending)
        log.debug(
            "decided",
            object=str(t.key),
            action=entry.action.value,
            why=entry.message,
            drift=[c.path for c in entry.drift],
            conflicts=[f"{c.path} ({c.manager})" for c in entry.conflicts],
        )
        return entry

    def _ask_server(
        self, t: Target, live: Manifest | None, *, policy: ConflictPolicy, dry_run: bool, pending: str
    ) -> Entry:
        try:
            if pending:
                entry = explain(t, None, None, self.field_manager, dry_run=True)
                entry.message = f"would create ({pending})"
                return entry
            if dry_run:
                return self._dry_run(t, live)
            return self._apply(t, live, policy)
        except ApiUnavailableError as exc:  # never sent: the object is as it was
            log.debug("apply not attempted", object=str(t.key), error=str(exc))
            return not_attempted_entry(t, exc)
        except ApiTimeoutError as exc:
            if dry_run:
                return Entry(t.key, t.info.api_version, Action.ERROR, message=str(exc), origin=t.origin)
            return self._after_timeout(t, live, exc)
        except ClusterError as exc:
            log.warning("apply failed", object=str(t.key), error=str(exc))
            return Entry(t.key, t.info.api_version, Action.ERROR, message=str(exc), origin=t.origin)

    def _after_timeout(self, t: Target, live: Manifest | None, exc: ApiTimeoutError) -> Entry:
        """An apply sent but unanswered may have landed: re-read, and report it applied if our intent is live."""
        try:
            now = self.client.get_or_none(t.path)
        except ClusterError as again:
            message = f"outcome unknown: {exc} (re-read failed: {again})"
        else:
            if is_unchanged(t, now):  # this very intent hash, every field we set holds its value
                entry = explain(t, live, now, self.field_manager, dry_run=False)
                entry.message = (entry.message + "; " if entry.message else "") + (
                    "the request timed out, a re-read shows it applied"
                )
                return entry
            message = f"outcome unknown: {exc} (a re-read does not show this intent applied)"
        log.warning("apply failed", object=str(t.key), error=message)
        return Entry(t.key, t.info.api_version, Action.ERROR, message=message, origin=t.origin)

    def _try_ssa(
        self, t: Target, body: Manifest, live: Manifest | None, *, dry_run: bool
    ) -> tuple[Manifest | None, list[ownership.Conflict]]:
        """A non-forced apply; a field-manager 409 comes back as its conflicts rather than an exception.

        Conflicts over our bookkeeping alone are not conflicts: the apply is repeated with force."""
        result, conflicts, _status = self._try_ssa_status(t, body, live, dry_run=dry_run)
        return result, conflicts

    def _try_ssa_status(
        self, t: Target, body: Manifest, live: Manifest | None, *, dry_run: bool
    ) -> tuple[Manifest | None, list[ownership.Conflict], int]:
        """`_try_ssa` plus the HTTP status of the apply that went through (0 when it conflicted)."""
        try:
            status, result = self._ssa_status(t, body, force=False, dry_run=dry_run)
            return result, [], status
        except ConflictError as exc:
            conflicts = ownership.parse_conflicts(exc.body, live=live)
            if not conflicts:
                raise  # a resourceVersion precondition, not a field fight
            real = [c for c in conflicts if not is_bookkeeping_conflict(c)]
            if real:
                return None, real, 0
        # Only our own bookkeeping was contested (written under another --field-manager): ours to take.
        status, result = self._ssa_status(t, body, force=True, dry_run=dry_run)
        return result, [], status

    def _dry_run(self, t: Target, live: Manifest | None) -> Entry:
        """What `_apply` would do, without doing it; including the client-side-apply takeover, which a dry
        run cannot perform: its fields are not conflicts (they will be ours) and those Git dropped go."""
        takeover = has_client_side_apply(live)
        result, conflicts = self._try_ssa(t, t.manifest, live, dry_run=True)
        if conflicts:  # what the object would become if Git won, for the field-level report
            result = self._ssa(t, t.manifest, force=True, dry_run=True)
            if takeover:
                conflicts = [c for c in conflicts if not is_client_side_apply(c.manager, c.operation, c.subresource)]
        if takeover and result is not None:
            taken = after_takeover(result, t.manifest, self.field_manager)
            result = result if taken is result else self._defaulted(t, taken)
        entry = explain(t, live, result, self.field_manager, conflicts=conflicts, dry_run=True)
        if takeover:
            entry.message = _join(entry.message, f"would take over {_TAKEOVER}")
        return entry

    def _defaulted(self, t: Target, obj: Manifest) -> Manifest:
        """`obj` as the server would store it (a dry-run update): a field the takeover removes that the
        server defaults again (a Deployment's `strategy`, a container's `imagePullPolicy`) is no change."""
        meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("managedFields", "resourceVersion")}
        try:
            stored: Manifest = self.client.request(
                "PUT",
                t.path,
                query={"dryRun": "All", "fieldManager": self.field_manager},
                body={**obj, "metadata": meta},
            )
        except ApiError as exc:  # the local estimate still shows the removals sync will make
            log.debug("dry-run update refused; showing the takeover as computed", object=str(t.key), error=str(exc))
            return obj
        return stored

    def _apply(self, t: Target, live: Manifest | None, policy: ConflictPolicy) -> Entry:
        upgraded = live is not None and self._upgrade_client_side_apply(t, live)
        entry, created = self._apply_policy(t, live, policy)
        if live is None and not created:
            entry = self._adopt_after_stale_read(t, policy)
        if upgraded:
            entry.message = _join(entry.message, f"took over {_TAKEOVER}")
        return entry

    def _upgrade_client_side_apply(self, t: Target, live: Manifest) -> bool:
        """Hand `kubectl apply` (client-side) ownership to our Apply manager, as client-go's csaupgrade does.

        Otherwise a field later removed from Git stays forever: the old manager still owns it, and a
        server-side apply under another name can only drop its own claim.
        """
        meta = live.get("metadata") or {}
        entries = meta.get("managedFields") or []
        if not has_client_side_apply(live):
            return False
        ours = next(
            (e for e in entries if e.get("manager") == self.field_manager and e.get("operation") == "Apply"), None
        )
        upgraded: list[Manifest] = []
        for e in entries:
            if not is_client_side_apply_entry(e):
                upgraded.append(e)
            elif ours is not None:
                ours["fieldsV1"] = _merge_fields(ours.get("fieldsV1") or {}, e.get("fieldsV1") or {})
            else:
                ours = {**e, "manager": self.field_manager, "operation": "Apply"}
                upgraded.append(ours)
        ops = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
            {"op": "replace", "path": "/metadata/managedFields", "value": upgraded},
        ]
        try:
            self.client.request("PATCH", t.path, body=ops, content_type=JSON_PATCH)
        except ApiError as exc:  # changed meanwhile (test failed) or forbidden: apply anyway, retry next pass
            log.info("client-side apply upgrade skipped", object=str(t.key), error=str(exc))
            return False
        return True

    def _adopt_after_stale_read(self, t: Target, policy: ConflictPolicy) -> Entry:
        """The plan read the object as absent, yet our apply did not create it (HTTP 200, not 201).

        A lagging watch cache or a refused read: the object existed before us, so it must carry the
        adopted marker (prune releases it, never deletes it). The same body plus the marker is applied
        again; the fact comes from the API server's answer, not from the read.
        """
        log.warning("object existed although read as absent; marking it adopted", object=str(t.key))
        current = self.client.get_or_none(t.path)
        mark_adopted(t)
        entry, _created = self._apply_policy(t, current, policy)
        note = "existed before gitops-sync applied it (read as absent: stale cache or refused read); marked adopted"
        entry.message = f"{entry.message}; {note}" if entry.message else note
        return entry

    def _apply_policy(self, t: Target, live: Manifest | None, policy: ConflictPolicy) -> tuple[Entry, bool]:
        """Apply under `policy`; also whether one of its requests created the object (HTTP 201)."""
        if policy is ConflictPolicy.FORCE:
            status, forced = self._ssa_status(t, t.manifest, force=True, dry_run=False)
            return explain(t, live, forced, self.field_manager, dry_run=False), status == 201
        result, conflicts, status = self._try_ssa_status(t, t.manifest, live, dry_run=False)
        if not conflicts:
            return explain(t, live, result, self.field_manager, dry_run=False), status == 201
        if policy is ConflictPolicy.SKIP:
            entry = explain(t, live, None, self.field_manager, conflicts=conflicts, dry_run=False)
            entry.message = f"skipped: {len(conflicts)} conflicting field(s); nothing applied to this object"
            return entry, False
        # REPORT: apply all but the contested fields; a field contested meanwhile is dropped on one retry.
        result, more, status = self._try_ssa_status(t, without_conflicts(t.manifest, conflicts), live, dry_run=False)
        if more:
            conflicts += more
            status, result = self._ssa_status(t, without_conflicts(t.manifest, conflicts), force=False, dry_run=False)
        entry = explain(t, live, result, self.field_manager, conflicts=conflicts, dry_run=False)
        entry.message = (
            f"applied all but {len(conflicts)} conflicting field(s), left to their owner "
            "(use --on-conflict force to take them)"
        )
        return entry, status == 201

    def _ssa(self, t: Target, body: Manifest, *, force: bool, dry_run: bool) -> Manifest:
        return self._ssa_status(t, body, force=force, dry_run=dry_run)[1]

    def _ssa_status(self, t: Target, body: Manifest, *, force: bool, dry_run: bool) -> tuple[int, Manifest]:
        """One server-side apply; the status tells a create (201) from an update (200)."""
        status, result = self.client.request_status(
            "PATCH",
            t.path,
            query={"fieldManager": self.field_manager, "force": force, "dryRun": "All" if dry_run else None},
            body=body,
            content_type=APPLY_PATCH,
        )
        return status, result

    def _wait_crds_established(self, crds: list[Target], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in crds:
            while True:
                obj = self.client.get_or_none(t.path)
                if obj is not None and assess(obj).status is Status.CURRENT:
                    break
                if time.monotonic() > deadline:
                    log.warning("CRD not established in time", crd=t.key.name)
                    break
                time.sleep(0.2)

    # -- pruning ----------------------------------------------------------------------------

    def prune(self, members: Iterable[Manifest], *, dry_run: bool, on_entry: OnEntry | None = None) -> list[Entry]:
        """Delete members that left Git; objects we adopted are released (label removed), not deleted."""
        by_key = {ObjectKey.of(m): m for m in members}
        entries: list[Entry] = []
        for stage in ordering.prune_order(list(by_key)):
            entries.extend(self._each(lambda k: self._prune_one(by_key[k], k, dry_run=dry_run), stage, on_entry))
        return entries

    def _prune_one(self, obj: Manifest, key: ObjectKey, *, dry_run: bool) -> Entry:
        api_version = str(obj.get("apiVersion", ""))
        entry = Entry(key, api_version, Action.PRUNE)
        info = self.discovery.lookup(api_version, key.kind)
        if info is None:
            entry.action, entry.message = Action.ERROR, "kind no longer served; cannot prune"
            return entry
        path = info.path(key.namespace or None, key.name)
        adopted = ((obj.get("metadata") or {}).get("annotations") or {}).get(ADOPTED) == "true"
        verb = "would " if dry_run else ""
        try:
            if adopted:
                entry.message = f"{verb}release (not created by gitops-sync: label removed, object kept)"
                if not dry_run:
                    self._release(path, obj)
            else:
                entry.message = f"{verb}delete (left Git)" if dry_run else "deleted (left Git)"
                # With a body the API server reads every option from it and ignores the query string.
                options: dict[str, object] = {
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "propagationPolicy": "Background",
                    "preconditions": {"uid": (obj.get("metadata") or {}).get("uid")},
                }
                if dry_run:
                    options["dryRun"] = ["All"]
                self.client.request("DELETE", path, body=options)
        except NotFoundError:
            entry.message = "already gone"
        except ApiUnavailableError as exc:
            entry.action, entry.message = Action.ERROR, f"prune not attempted: {exc}"
        except ClusterError as exc:
            entry.action, entry.message = Action.ERROR, f"prune failed: {exc}"
        return entry

    def _release(self, path: str, obj: Manifest) -> None:
        """Drop our label and annotations with a JSON patch guarded by resourceVersion."""
        meta = obj.get("metadata") or {}
        ops: list[dict[str, object]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")}
        ]
        if PART_OF in (meta.get("labels") or {}):
            ops.append({"op": "remove", "path": "/metadata/labels/" + _escape(PART_OF)})
        for ann in (ADOPTED, INTENT_HASH):
            if ann in (meta.get("annotations") or {}):
                ops.append({"op": "remove", "path": "/metadata/annotations/" + _escape(ann)})
        self.client.request("PATCH", path, body=ops, content_type=JSON_PATCH)

    def relabel(self, members: Iterable[Manifest], applyset_id: str) -> list[str]:
        """Move members of an inventory being taken over into `applyset_id` (label only); returns errors.

        For objects no longer in Git when not pruning: they stay ours, so a later --prune still finds them.
        """

        def one(obj: Manifest) -> str:
            key = ObjectKey.of(obj)
            info = self.discovery.lookup(str(obj.get("apiVersion", "")), key.kind)
            if info is None:
                return f"{key}: kind no longer served; cannot move it into the new inventory"
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            ops = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                {"op": "replace", "path": "/metadata/labels/" + _escape(PART_OF), "value": applyset_id},
            ]
            path = info.path(key.namespace or None, key.name)
            try:
                self.client.request("PATCH", path, body=ops, content_type=JSON_PATCH)
            except NotFoundError:
                return ""
            except ClusterError as exc:
                return f"{key}: cannot move it into the new inventory: {exc}"
            return ""

        return [e for e in self._each(one, list(members)) if e]

    # -- waiting ----------------------------------------------------------------------------

    def wait(
        self,
        targets: Sequence[Target],
        timeout: float,
        interval: float = 0.5,
        *,
        on_ready: Callable[[ObjectKey], None] | None = None,
    ) -> list[WaitResult]:
        """Poll until every target is Current (kstatus rules); returns the ones that are not.

        Each object that becomes Current is logged (info) and passed to `on_ready` (a progress bar).
        """
        started = time.monotonic()
        deadline = started + timeout
        pending = list(targets)
        last: dict[ObjectKey, WaitResult] = {}
        while pending:

            def check(t: Target) -> WaitResult:
                obj = self.client.get_or_none(t.path)
                if obj is None:
                    return WaitResult(t.key, Status.NOT_FOUND, "not found")
                h = assess(obj)
                return WaitResult(t.key, h.status, h.message)

            results = self._each(check, pending)
            last = {r.key: r for r in results}
            for r in results:
                if r.status is Status.CURRENT:
                    log.info("ready", object=str(r.key), seconds=round(time.monotonic() - started, 1))
                    if on_ready:
                        on_ready(r.key)
            failed = [r for r in results if r.status is Status.FAILED]
            pending = [t for t, r in zip(pending, results, strict=True) if r.status is not Status.CURRENT]
            if failed or not pending or time.monotonic() >= deadline:
                break
            time.sleep(interval)
        return [last[t.key] for t in pending]

    # -- helpers ----------------------------------------------------------------------------

    def _each(
        self, fn: Callable[[_T], _R], items: Sequence[_T], on_done: Callable[[_R], None] | None = None
    ) -> list[_R]:
        """`fn` over items on the thread pool, in order; `on_done` sees each result (progress display)."""

        def run(item: _T) -> _R:
            r = fn(item)
            if on_done:
                on_done(r)
            return r

        if len(items) <= 1 or self.concurrency == 1:
            return [run(i) for i in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(run, items))


def not_attempted_entry(t: Target, exc: Exception) -> Entry:
    """The entry of an object no request was sent for (API server down, deadline passed): left as it was."""
    return Entry(t.key, t.info.api_version, Action.ERROR, message=f"{NOT_ATTEMPTED}{exc}", origin=t.origin)


def _pending_reason(t: Target, new_namespaces: set[str], new_crds: set[tuple[str, str]]) -> str:
    """Why a dry-run cannot ask the server yet: its namespace or CRD is created in the same pass."""
    if t.key.namespace and t.key.namespace in new_namespaces:
        return f"namespace {t.key.namespace} is created first"
    if (t.key.group, t.key.kind) in new_crds:
        return "its CustomResourceDefinition is created first"
    return ""


def _crd_group_kind(crd: Manifest) -> tuple[str, str]:
    spec = crd.get("spec") or {}
    return str(spec.get("group", "")), str((spec.get("names") or {}).get("kind", ""))


_TAKEOVER = "the fields of kubectl apply (client-side)"


def _join(message: str, more: str) -> str:
    return f"{message}; {more}" if message else more


def _merge_fields(a: Manifest, b: Manifest) -> Manifest:
    """Union of two fieldsV1 trees."""
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge_fields(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
