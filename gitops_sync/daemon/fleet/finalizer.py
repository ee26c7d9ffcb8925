"""A GitSync's finalizer: added while its deletion would prune, and the prune done before it goes.

A worker of the shard's holder runs both (controller.py `_run_source`): `ensure` keeps the finalizer as
the GitSync's deletion policy wants it; `finalize` runs once the GitSync is being deleted: prune what it
applied (its deletion policy deletes, self-heal, not suspended), then let it go. A prune that fails or is
refused keeps the finalizer, is retried with backoff and is what its status says (Ready=False, reason
PruneRefused or PruneFailed, the first object), never the Ready of its last pass; WaitForTermination keeps
it until the objects are gone or spec.timeout passed.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet.gitsync import GitSync
from gitops_sync.daemon.fleet.sources import Source
from gitops_sync.daemon.fleet.status import Deletion
from gitops_sync.daemon.reconcile.failures import PRUNE_FAILED, Failures, failures_of
from gitops_sync.daemon.reconcile.reconciler import SourceReconciler
from gitops_sync.daemon.reconcile.reporter import FULL, QueueKey
from gitops_sync.daemon.runtime.events import WARNING
from gitops_sync.daemon.runtime.manager import Queue
from gitops_sync.errors import ClusterError, GitOpsError
from gitops_sync.log import get_logger
from gitops_sync.plan.changeset import Action, Entry
from gitops_sync.resource import Manifest, ObjectKey
from gitops_sync.source import mask_url

log = get_logger("gitops_sync.daemon")


class Finalizer:
    """Runs on the worker of the source being deleted (one at a time per source)."""

    def __init__(
        self,
        client: Client,
        write_status: Callable[[str], object],
        fence: Callable[[int], Callable[[], bool]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.write_status = write_status
        self.fence = fence
        self.clock = clock  # wall time: deletionTimestamp is one

    def ensure(self, ref: str, obj: Manifest, shard: int, *, present: bool) -> None:
        patch = gitsync.finalizer_patch(obj, present=present)
        if patch is None:
            return
        ns, name = ref.split("/", 1)
        try:
            self.client.request(
                "PATCH",
                gitsync.object_path(ns, name),
                body=patch,
                content_type="application/merge-patch+json",
                fence=self.fence(shard),
            )
        except ClusterError as exc:  # changed meanwhile (409) or gone: its next event tries again
            log.info("cannot update the GitSync's finalizer", gitsync=ref, error=mask_url(str(exc)))

    def finalize(self, ref: str, src: Source, obj: Manifest, asks: Queue[QueueKey]) -> None:
        """`asks`: what this turn asks of the source's queue keys (the reconcile handler settles it)."""
        if gitsync.FINALIZER not in gitsync.finalizers(obj):
            return
        gs, r = src.gs, src.reconciler
        assert r is not None
        if gs.wants_finalizer and not gs.suspend:
            if not self._prune(ref, src, r, obj, asks):
                return  # kept: retried, or waiting for its objects to go
        else:
            log.info("GitSync deleted: its objects are left in place", gitsync=ref, reason=_why_kept(gs))
        asks.forget(FULL)
        self.ensure(ref, obj, src.shard, present=False)

    def _prune(self, ref: str, src: Source, r: SourceReconciler, obj: Manifest, asks: Queue[QueueKey]) -> bool:
        """Collect what the source applied; True once its objects are gone (or waited out)."""
        gs = src.gs
        waits = gs.deletion_policy == gitsync.WAIT_FOR_TERMINATION
        entries: list[Entry] = []
        try:
            # Delete, MirrorPrune: a deletion the API server accepted is done
            cs, due = r.collect(keep_parent=waits, pending_done=not waits)
            entries = cs.entries
            failures = failures_of(entries, cs.errors, ())
            left = r.remaining() if waits and due else []
        except GitOpsError as exc:
            due, left = True, []
            failures = Failures(errors=[mask_url(str(exc))], count=1, reason=PRUNE_FAILED)
        if failures:
            self._failed(ref, src, r, failures, asks)
            return False
        if left and not self._waited_out(gs, obj):
            self._waiting(ref, src, left, asks)
            return False
        if left:
            r.source_event(
                "TerminationTimeout",
                WARNING,
                f"deleting: {len(left)} object(s) still there after spec.timeout ({gs.timeout:g}s); letting the "
                f"GitSync go: {', '.join(str(k) for k in left[:5])}",
            )
        if waits and due:  # every member gone (or waited out): now the parent goes too
            r.collect(pending_done=True)  # waited out: what is still held is left to its finalizers
        _log_deleted(ref, gs, entries, due)
        return True

    def _failed(self, ref: str, src: Source, r: SourceReconciler, failures: Failures, asks: Queue[QueueKey]) -> None:
        delay = asks.add_rate_limited(FULL)
        log.error(
            "GitSync deleted: prune failed; keeping it until it succeeds",
            gitsync=ref,
            errors=[f.text() for f in failures.objects[:5]] + failures.errors[:5],
            retry_in=round(delay, 2),
        )
        r.source_event(failures.reason, WARNING, f"deleting: objects not pruned, retrying: {failures.summary()}")
        src.deletion = Deletion(failures)
        self.write_status(ref)

    def _waiting(self, ref: str, src: Source, left: list[ObjectKey], asks: Queue[QueueKey]) -> None:
        named = ", ".join(str(k) for k in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        src.deletion = Deletion(Failures(), waiting=f"waiting for {len(left)} object(s) to be gone: {named}")
        self.write_status(ref)
        asks.add_after(FULL, 2.0)

    def _waited_out(self, gs: GitSync, obj: Manifest) -> bool:
        """WaitForTermination gives up after spec.timeout since the deletion was asked for."""
        stamp = str((obj.get("metadata") or {}).get("deletionTimestamp") or "")
        try:
            since = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            return False
        return self.clock() - since > gs.timeout


def _why_kept(gs: GitSync) -> str:
    if gs.suspend:
        return "suspended"
    if not gs.self_heal:
        return "detect-only"
    if gs.deletion_policy == gitsync.ORPHAN:
        return f"deletionPolicy {gs.deletion_policy}"
    return "prune is off"


def _log_deleted(ref: str, gs: GitSync, entries: list[Entry], due: bool) -> None:
    log.info(
        "GitSync deleted: its objects were pruned"
        if due
        else "GitSync deleted: nothing applied cleanly, nothing pruned",
        gitsync=ref,
        pruned=sum(1 for e in entries if e.action is Action.PRUNE and "release" not in e.message),
        released=sum(1 for e in entries if "release" in e.message),
        pending=sum(1 for e in entries if e.action is Action.TERMINATING),
        kept=sum(1 for e in entries if e.action not in (Action.PRUNE, Action.TERMINATING)),
        policy=gs.deletion_policy,
    )


__all__ = ["Finalizer"]
