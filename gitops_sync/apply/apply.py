"""Apply (or dry-run) the desired objects, stage by stage: every write a server-side apply.

`Applier.apply_all` takes the targets and their live state (`live.fetch_live` or the daemon's watch
cache) and returns one `Entry` per object for the change set (`plan.changeset`), which the report and
the daemon's status read. An object provably unchanged costs no request; the rest get a server-side
apply under our field manager, or with `dry_run` the same request with `dryRun=All`, so what `diff`
promises is what `sync` does. Conflicts are settled by the `ConflictPolicy`; objects created with
client-side `kubectl apply` are taken over first (`takeover`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gitops_sync.apply import ordering, takeover
from gitops_sync.apply.live import LiveMap
from gitops_sync.apply.pool import each
from gitops_sync.apply.wait import wait_crds_established
from gitops_sync.cluster.client import APPLY_PATCH, Client
from gitops_sync.conventions import ADOPTED, FIELD_MANAGER, PART_OF, ConflictPolicy
from gitops_sync.errors import ApiTimeoutError, ApiUnavailableError, ClusterError, ConflictError
from gitops_sync.log import get_logger
from gitops_sync.plan import ownership
from gitops_sync.plan.bookkeeping import (
    CREATE_ONLY_RV,
    foreign_applyset,
    is_bookkeeping_conflict,
    mark_adopted,
    with_resource_version,
    without_conflicts,
)
from gitops_sync.plan.changeset import NOT_SENT, Action, Entry
from gitops_sync.plan.client_side import has_client_side_apply
from gitops_sync.plan.planner import Target, create_only_entry, explain, is_unchanged
from gitops_sync.plan.policy import is_create_only, object_policy
from gitops_sync.resource import Manifest

log = get_logger(__name__)

OnEntry = Callable[[Entry], None]

# The message prefix of an object no request was sent for: it is exactly as it was before the pass.
NOT_ATTEMPTED = "not attempted: "


class Applier:
    """One apply step: the client, our field manager and how many requests may be in flight."""

    def __init__(self, client: Client, *, field_manager: str = FIELD_MANAGER, concurrency: int = 8) -> None:
        self.client = client
        self.field_manager = field_manager
        self.concurrency = max(1, concurrency)

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
                own = object_policy(t, policy)  # gitops-sync.io/on-conflict on the object wins
                return self._apply_one(t, live.get(t.key), policy=own, dry_run=dry_run, pending=pending)

            # The fast path sends nothing: pure CPU, done here rather than on the pool, where thousands of
            # tiny tasks only fight over the GIL. The pool gets the objects that need a request.
            quick = [self._if_unchanged(t, live.get(t.key), dry_run=dry_run) for t in stage]
            if on_entry:
                for e in quick:
                    if e is not None:
                        on_entry(e)
            todo = [t for t, e in zip(stage, quick, strict=True) if e is None]
            sent = iter(each(one, todo, concurrency=self.concurrency, on_done=on_entry))
            entries.extend(e if e is not None else next(sent) for e in quick)
            if index == 0 and not dry_run:
                wait_crds_established(
                    self.client, [t for t in stage if t.key.kind == "CustomResourceDefinition"], wait_crds
                )
        return entries

    def _if_unchanged(self, t: Target, live: Manifest | None, *, dry_run: bool) -> Entry | None:
        """The entry of an object provably unchanged (see `is_unchanged`), without a request; else None."""
        if is_unchanged(t, live, self.field_manager):
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
            return Entry(t.key, t.info.api_version, Action.ERROR, message=str(exc), origin=t.origin).caused_by(exc)

    def _after_timeout(self, t: Target, live: Manifest | None, exc: ApiTimeoutError) -> Entry:
        """An apply sent but unanswered may have landed: re-read, and report it applied if our intent is live."""
        try:
            now = self.client.get_or_none(t.path)
        except ClusterError as again:
            message = f"outcome unknown: {exc} (re-read failed: {again})"
        else:
            if is_unchanged(t, now, self.field_manager):  # this very intent hash, every field we set is live
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
        try:
            return self._ssa(t, body, force=False, dry_run=dry_run), []
        except ConflictError as exc:
            conflicts = ownership.parse_conflicts(exc.body, live=live)
            if not conflicts:
                raise  # a resourceVersion precondition, not a field fight
            real = [c for c in conflicts if not is_bookkeeping_conflict(c)]
            if real:
                return None, real
        # Only our own bookkeeping was contested (written under another --field-manager): ours to take.
        return self._ssa(t, body, force=True, dry_run=dry_run), []

    def _dry_run(self, t: Target, live: Manifest | None) -> Entry:
        """What `_apply` would do, without doing it; including the client-side-apply takeover, which a dry
        run cannot perform: its fields are not conflicts (they will be ours) and those Git dropped go."""
        taking_over = has_client_side_apply(live)
        result, conflicts = self._try_ssa(t, t.manifest, live, dry_run=True)
        if conflicts:  # what the object would become if Git won, for the field-level report
            result = self._ssa(t, t.manifest, force=True, dry_run=True)
            if taking_over:
                conflicts = takeover.remaining_conflicts(conflicts)
        if taking_over and result is not None:
            result = takeover.preview(self.client, t, result, self.field_manager)
        entry = explain(t, live, result, self.field_manager, conflicts=conflicts, dry_run=True)
        if taking_over:
            entry.message = _join(entry.message, f"would take over {takeover.TAKEOVER}")
        return entry

    def _apply(self, t: Target, live: Manifest | None, policy: ConflictPolicy) -> Entry:
        if live is None:
            return self._create(t, policy)
        upgraded = takeover.upgrade(self.client, t, live, self.field_manager)
        entry = self._apply_policy(t, live, policy)
        if upgraded:
            entry.message = _join(entry.message, f"took over {takeover.TAKEOVER}")
        return entry

    def _create(self, t: Target, policy: ConflictPolicy) -> Entry:
        """An object planned absent: created by one apply that cannot touch an object that exists.

        The body carries a resourceVersion no object has (`CREATE_ONLY_RV`): the API server creates an absent
        object (the precondition applies to updates only) and refuses, with 409 and without writing, one that
        exists. So an object we did not create is never labelled ours without the adopted marker, whatever
        breaks between two writes (a crash, a lost answer): one write per create, no second one to undo.
        """
        body = with_resource_version(t.manifest, CREATE_ONLY_RV)
        try:
            status, result = self._ssa_status(t, body, force=False, dry_run=False)
        except ConflictError:  # it exists after all (a stale read or a racing create); nothing was written
            return self._adopt_after_stale_read(t, policy)
        if status != 201:  # the impossible resourceVersion matched: it existed, and our apply (our label) landed
            return self._adopt_after_stale_read(t, policy, untouched=False)
        return explain(t, None, result, self.field_manager, dry_run=False)

    def _adopt_after_stale_read(self, t: Target, policy: ConflictPolicy, *, untouched: bool = True) -> Entry:
        """The plan read the object as absent, yet the API server says it exists (409 to our create).

        A lagging watch cache, a refused read or a create racing ours: the object existed before us, so it
        is read again and, when nothing else rules it out, applied with the adopted marker in the same
        write that labels it ours (prune releases it, never deletes it). A member of another ApplySet is
        left alone, and so is an existing create-only object, as if the read had seen them. One already
        labelled a member of this very ApplySet (another run of this source created it a moment ago) is
        ours already: applied as the member it is, not adopted (an adopted member would never be deleted).
        `untouched`: nothing of ours was written (a 409), so a label of ours on it is not our own doing.
        """
        current = self.client.get_or_none(t.path)
        ours = _part_of(t.manifest)
        if untouched and current is not None and ours and _part_of(current) == ours:
            return self._apply_member_created_meanwhile(t, current, policy)
        log.warning("object existed although read as absent; marking it adopted", object=str(t.key))
        note = "existed before gitops-sync applied it (read as absent: stale cache or refused read)"
        other = foreign_applyset(current, [ours])
        if other:
            message = f"{note}; a member of another ApplySet ({other}): left alone, the next pass plans it again"
            return Entry(t.key, t.info.api_version, Action.ERROR, message=message, origin=t.origin)
        if current is not None and is_create_only(t):  # the engine leaves an existing one untouched
            entry = create_only_entry(t, current, self.field_manager, dry_run=False)
            entry.message = f"{note}; {entry.message}"
            return entry
        if current is None:  # gone again meanwhile: nothing was written, the next pass plans it afresh
            message = f"{note}; gone again when read: not applied, the next pass plans it again"
            return Entry(t.key, t.info.api_version, Action.ERROR, message=message, origin=t.origin)
        mark_adopted(t)
        entry = self._apply(t, current, policy)
        entry.message = f"{entry.message}; {note}; marked adopted" if entry.message else f"{note}; marked adopted"
        return entry

    def _apply_member_created_meanwhile(self, t: Target, current: Manifest, policy: ConflictPolicy) -> Entry:
        """A 409 to our create from an object labelled a member of our ApplySet: applied as it is.

        Its membership is the label, so prune already counts it ours; marking it adopted would only turn
        a later delete into a release. An adopted marker it carries (it existed before this source) stays,
        and so does an existing create-only object, untouched.
        """
        log.info("object created meanwhile by another run of this source; applying it as a member", object=str(t.key))
        note = "already a member of this source (another run of it created it meanwhile)"
        if is_create_only(t):
            entry = create_only_entry(t, current, self.field_manager, dry_run=False)
            entry.message = f"{note}; {entry.message}"
            return entry
        if _annotation(current, ADOPTED) == "true":
            mark_adopted(t)
        entry = self._apply(t, current, policy)
        entry.message = f"{entry.message}; {note}" if entry.message else note
        return entry

    def _apply_policy(self, t: Target, live: Manifest, policy: ConflictPolicy) -> Entry:
        """Apply to an existing object under `policy`."""
        if policy is ConflictPolicy.FORCE:
            forced = self._ssa(t, t.manifest, force=True, dry_run=False)
            return explain(t, live, forced, self.field_manager, dry_run=False)
        result, conflicts = self._try_ssa(t, t.manifest, live, dry_run=False)
        if not conflicts:
            return explain(t, live, result, self.field_manager, dry_run=False)
        if policy is ConflictPolicy.SKIP:
            entry = explain(t, live, None, self.field_manager, conflicts=conflicts, dry_run=False)
            entry.message = f"skipped: {len(conflicts)} conflicting field(s); nothing applied to this object"
            return entry
        # REPORT: apply all but the contested fields; a field contested meanwhile is dropped on one retry.
        result, more = self._try_ssa(t, without_conflicts(t.manifest, conflicts), live, dry_run=False)
        if more:
            conflicts += more
            result = self._ssa(t, without_conflicts(t.manifest, conflicts), force=False, dry_run=False)
        entry = explain(t, live, result, self.field_manager, conflicts=conflicts, dry_run=False)
        entry.message = (
            f"applied all but {len(conflicts)} conflicting field(s), left to their owner "
            "(use --on-conflict force to take them)"
        )
        return entry

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


def not_attempted_entry(t: Target, exc: Exception) -> Entry:
    """The entry of an object no request was sent for (API server down, deadline passed): left as it was."""
    message = f"{NOT_ATTEMPTED}{exc}"
    return Entry(t.key, t.info.api_version, Action.ERROR, message=message, origin=t.origin, reason=NOT_SENT)


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


def _part_of(manifest: Manifest) -> str:
    return str(((manifest.get("metadata") or {}).get("labels") or {}).get(PART_OF, ""))


def _annotation(manifest: Manifest, key: str) -> str:
    return str(((manifest.get("metadata") or {}).get("annotations") or {}).get(key, ""))


def _join(message: str, more: str) -> str:
    return f"{message}; {more}" if message else more
