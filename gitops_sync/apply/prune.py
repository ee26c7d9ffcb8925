"""Prune: delete the inventory members that left Git, release the ones we adopted, relabel on a takeover.

The engine decides which members are gone (`inventory.list_members` minus the desired objects, after the
cascade guard and only on a clean pass); this sends the requests, in reverse apply order (workloads before
their Namespace and CRD), and returns one `Entry` per member for the change set. A delete is guarded by the
member's uid, a release or relabel by its resourceVersion, so an object re-created or changed meanwhile is
never touched on the strength of an old read.

A DELETE accepted is not an object gone: the answer of one whose finalizers hold it (`plan.terminating`)
is the entry `terminating` ("deletion pending: finalizer X"), and a member already Terminating is sent
nothing (another DELETE changes nothing) and reported the same way on every pass until it is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gitops_sync.apply import ordering
from gitops_sync.apply.pool import each
from gitops_sync.cluster.client import JSON_PATCH, Client
from gitops_sync.cluster.discovery import Discovery
from gitops_sync.conventions import ADOPTED, INTENT_HASH, PART_OF
from gitops_sync.errors import ApiUnavailableError, ClusterError, NotFoundError
from gitops_sync.plan.changeset import NOT_SENT, Action, Entry, Terminating, finalizers_text
from gitops_sync.plan.policy import is_adopted
from gitops_sync.plan.terminating import holders, terminating
from gitops_sync.resource import Manifest, ObjectKey


def prune_members(
    client: Client,
    discovery: Discovery,
    members: Iterable[Manifest],
    *,
    dry_run: bool,
    concurrency: int,
    on_entry: Callable[[Entry], None] | None = None,
) -> list[Entry]:
    """Delete members that left Git; objects we adopted are released (label removed), not deleted."""
    by_key = {ObjectKey.of(m): m for m in members}
    entries: list[Entry] = []
    for stage in ordering.prune_order(list(by_key)):
        entries.extend(
            each(
                lambda k: _prune_one(client, discovery, by_key[k], k, dry_run=dry_run),
                stage,
                concurrency=concurrency,
                on_done=on_entry,
            )
        )
    return entries


def _prune_one(client: Client, discovery: Discovery, obj: Manifest, key: ObjectKey, *, dry_run: bool) -> Entry:
    api_version = str(obj.get("apiVersion", ""))
    entry = Entry(key, api_version, Action.PRUNE)
    info = discovery.lookup(api_version, key.kind)
    if info is None:
        entry.action, entry.message = Action.ERROR, "kind no longer served; cannot prune"
        return entry
    already = terminating(obj, in_git=False)
    if already is not None:  # deleted before (by a pass of ours or anyone): held, not gone; nothing to send
        return _pending(entry, already, f" since {already.since}; left Git: no DELETE sent again")
    path = info.path(key.namespace or None, key.name)
    adopted = is_adopted(obj)
    verb = "would " if dry_run else ""
    try:
        if adopted:
            entry.message = f"{verb}release (not created by gitops-sync: label removed, object kept)"
            if not dry_run:
                _release(client, path, obj)
        else:
            # With a body the API server reads every option from it and ignores the query string.
            options: dict[str, object] = {
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "propagationPolicy": "Background",
                "preconditions": {"uid": (obj.get("metadata") or {}).get("uid")},
            }
            if dry_run:
                options["dryRun"] = ["All"]
            answer = client.request("DELETE", path, body=options)
            _deleted(entry, answer, dry_run=dry_run)
    except NotFoundError:
        entry.message = "already gone"
    except ApiUnavailableError as exc:
        entry.action, entry.message, entry.reason = Action.ERROR, f"prune not attempted: {exc}", NOT_SENT
    except ClusterError as exc:
        entry.action, entry.message = Action.ERROR, f"prune failed: {exc}"
        entry.caused_by(exc)
    return entry


def _deleted(entry: Entry, answer: object, *, dry_run: bool) -> None:
    """What the DELETE's answer says: a Status (gone), or the object itself, still there with a
    deletionTimestamp (held by finalizers: pending; or being emptied by the API server: deleted)."""
    obj = answer if isinstance(answer, dict) and answer.get("kind") not in (None, "Status") else None
    left = terminating(obj, in_git=False)
    held = holders(obj) if obj is not None and left is not None else []
    if dry_run:
        entry.message = "would delete (left Git)" + (
            f"; deletion would wait for {finalizers_text(held)}" if held else ""
        )
    elif left is not None and held:
        _pending(entry, left, "; left Git: DELETE accepted, it stays until its finalizers are removed")
    elif left is not None:
        entry.message = "deleted (left Git; terminating: " + (
            "the API server deletes what it holds first)" if left.finalizers else "graceful termination)"
        )
    else:
        entry.message = "deleted (left Git)"


def _pending(entry: Entry, pending: Terminating, tail: str) -> Entry:
    entry.action, entry.terminating = Action.TERMINATING, pending
    entry.message = pending.describe() + tail
    return entry


def _release(client: Client, path: str, obj: Manifest) -> None:
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
    client.request("PATCH", path, body=ops, content_type=JSON_PATCH)


def relabel_members(
    client: Client, discovery: Discovery, members: Iterable[Manifest], applyset_id: str, *, concurrency: int
) -> list[str]:
    """Move members of an inventory being taken over into `applyset_id` (label only); returns errors.

    For objects no longer in Git when not pruning: they stay ours, so a later --prune still finds them.
    """

    def one(obj: Manifest) -> str:
        key = ObjectKey.of(obj)
        info = discovery.lookup(str(obj.get("apiVersion", "")), key.kind)
        if info is None:
            return f"{key}: kind no longer served; cannot move it into the new inventory"
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        ops = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "replace", "path": "/metadata/labels/" + _escape(PART_OF), "value": applyset_id},
        ]
        path = info.path(key.namespace or None, key.name)
        try:
            client.request("PATCH", path, body=ops, content_type=JSON_PATCH)
        except NotFoundError:
            return ""
        except ClusterError as exc:
            return f"{key}: cannot move it into the new inventory: {exc}"
        return ""

    return [e for e in each(one, list(members), concurrency=concurrency) if e]


def _escape(key: str) -> str:
    """A label or annotation key as one JSON-pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
