"""Helm hooks as phases around the apply: objects annotated `helm.sh/hook` (what `helm template` prints among
the chart's objects) are never applied as ordinary objects, never inventory members, never watched for drift.

`split` takes them out of a render (engine.load puts them on Checkout.hooks); a pass then runs
`pre-install`/`pre-upgrade` hooks before the apply and `post-install`/`post-upgrade` after prune, each event's
hooks one by one in `helm.sh/hook-weight` order (then kind and name), with `helm.sh/hook-delete-policy` honoured
(`before-hook-creation`, the default; `hook-succeeded`; `hook-failed`). A Job hook (or a Pod) is waited for until
it completes or fails; a failed hook stops the pass: after a pre-hook nothing is applied or pruned, after a
post-hook the revision is not recorded as applied (so the next pass runs the upgrade again).

Install or upgrade (phases.decide_release): install while the inventory records no applied revision (no pass
of this source has completed: the release was never installed); upgrade when it records one and this pass is
of another revision. A plain directory has no revisions: install only when its inventory did not exist yet.
`pre-delete`, `post-delete`, `test` and the rollback hooks are never run by a pass (and never applied).
What ran goes to ChangeSet.hooks (reports, /status).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gitops_sync.cluster.client import APPLY_PATCH
from gitops_sync.errors import ClusterError
from gitops_sync.log import get_logger
from gitops_sync.plan import planner
from gitops_sync.plan.changeset import ChangeSet
from gitops_sync.plan.planner import Target
from gitops_sync.resource import DesiredObject, ObjectKey

if TYPE_CHECKING:
    from gitops_sync.engine.core import Engine
    from gitops_sync.engine.state import PassState

log = get_logger(__name__)

HOOK = "helm.sh/hook"
WEIGHT = "helm.sh/hook-weight"
DELETE_POLICY = "helm.sh/hook-delete-policy"
BEFORE_CREATION, SUCCEEDED, FAILED = "before-hook-creation", "hook-succeeded", "hook-failed"
_POLL = 0.25


def _annotations(manifest: dict[str, Any]) -> dict[str, Any]:
    return (manifest.get("metadata") or {}).get("annotations") or {}


def split(objects: Sequence[DesiredObject]) -> tuple[list[DesiredObject], list[DesiredObject]]:
    """(ordinary objects, hooks): a hook is any object with a non-empty `helm.sh/hook` annotation."""
    plain: list[DesiredObject] = []
    hooks: list[DesiredObject] = []
    for obj in objects:
        (hooks if str(_annotations(obj.manifest).get(HOOK) or "").strip() else plain).append(obj)
    return plain, hooks


@dataclass(frozen=True)
class Hook:
    target: Target
    events: frozenset[str]
    weight: int
    policies: frozenset[str]

    @property
    def waits(self) -> bool:
        return self.target.key.kind in ("Job", "Pod") and self.target.key.group in ("", "batch")


def _hook(t: Target) -> Hook:
    ann = _annotations(t.manifest)
    events = events_of(t.manifest)
    try:
        weight = int(str(ann.get(WEIGHT, "0")).strip() or "0")
    except ValueError:
        weight = 0
    policies = frozenset(p.strip() for p in str(ann.get(DELETE_POLICY, "")).split(",") if p.strip())
    return Hook(t, events, weight, policies or frozenset({BEFORE_CREATION}))


def events_of(manifest: dict[str, Any]) -> frozenset[str]:
    """The events a hook object's `helm.sh/hook` annotation names."""
    return frozenset(e.strip() for e in str(_annotations(manifest).get(HOOK, "")).split(",") if e.strip())


def resolved(engine: Engine, objects: Sequence[DesiredObject], namespace: str) -> list[Target]:
    """Hook objects resolved against the cluster, one at a time: hooks named by generateName share the key of
    an empty name (each run creates a new one)."""
    return [t for o in objects for t in planner.resolve([o], engine.discovery, namespace)]


def due(engine: Engine, s: PassState, event: str) -> list[Hook]:
    """The hooks of `event` (`pre-install`, …), resolved against the cluster, in weight, kind, name order."""
    objects = [o for o in s.checkout.hooks if isinstance(o, DesiredObject)]
    return of_event(resolved(engine, objects, s.opts.namespace), event)


def of_event(targets: Sequence[Target], event: str) -> list[Hook]:
    """The hooks among `targets` that `event` runs, in weight, kind, name order."""
    hooks = [h for h in map(_hook, targets) if event in h.events]
    return sorted(hooks, key=lambda h: (h.weight, h.target.key.kind, h.target.key.name or _generate_name(h.target)))


def _generate_name(t: Target) -> str:
    return str((t.manifest.get("metadata") or {}).get("generateName") or "")


def run_event(engine: Engine, s: PassState, event: str) -> bool:
    """Run the hooks of `event` one by one; False (and an error in the change set) when one failed."""
    return run_hooks(engine, s.cs, due(engine, s, event), event, s.opts.timeout)


def run_hooks(engine: Engine, cs: ChangeSet, hooks: Sequence[Hook], event: str, timeout: float) -> bool:
    """Run `hooks` (of `event`) one by one, each within `timeout`; False (and an error in `cs`) when one
    failed: the rest are not run."""
    for hook in hooks:
        ok, message, key = _run(engine, hook, timeout)
        cs.hooks.append(
            {"event": event, "object": str(key), "weight": str(hook.weight), "result": message, "ok": str(ok).lower()}
        )
        log.info("hook ran", hook_event=event, object=str(key), weight=hook.weight, ok=ok, result=message)
        if not ok:
            cs.errors.append(f"hook {event} {key} (weight {hook.weight}) failed: {message}")
            return False
    return True


def _run(engine: Engine, hook: Hook, timeout: float) -> tuple[bool, str, ObjectKey]:
    """(succeeded, what happened, the object): created (a generateName hook: a new object, by POST) or
    applied (server-side, after deleting the previous one under before-hook-creation), waited for, deleted
    as its policy says."""
    t, client = hook.target, engine.client
    try:
        if not t.key.name:
            created = client.request(
                "POST", t.collection, query={"fieldManager": engine.field_manager}, body=t.manifest
            )
            name = str(((created or {}).get("metadata") or {}).get("name") or "")
            hook = replace(hook, target=replace(t, key=replace(t.key, name=name)))
        else:
            if BEFORE_CREATION in hook.policies and client.get_or_none(t.path) is not None:
                _delete(engine, hook, timeout)
            client.request(
                "PATCH",
                t.path,
                query={"fieldManager": engine.field_manager, "force": True},
                body=t.manifest,
                content_type=APPLY_PATCH,
            )
        ok, message = _wait(engine, hook, timeout) if hook.waits else (True, "created")
        if (ok and SUCCEEDED in hook.policies) or (not ok and FAILED in hook.policies):
            _delete(engine, hook, timeout)
            message += "; deleted (hook-delete-policy)"
        return ok, message, hook.target.key
    except ClusterError as exc:
        return False, str(exc), hook.target.key


def _delete(engine: Engine, hook: Hook, timeout: float) -> None:
    """Delete the hook object (its Pods with it) and wait until it is gone."""
    t = hook.target
    try:
        engine.client.request("DELETE", t.path, query={"propagationPolicy": "Background"})
    except ClusterError as exc:
        if getattr(exc, "status", 0) != 404:
            raise
    left = engine.manager.wait_deleted([(t.key, t.info.api_version)], timeout)
    if left:
        raise ClusterError(f"{t.key} still exists {timeout:.0f}s after its deletion")


def _wait(engine: Engine, hook: Hook, timeout: float) -> tuple[bool, str]:
    """A Job until its Complete or Failed condition, a Pod until Succeeded or Failed, within `timeout`."""
    t, deadline = hook.target, time.monotonic() + timeout
    while True:
        live = engine.client.get_or_none(t.path) or {}
        status = live.get("status") or {}
        if t.key.kind == "Job":
            for c in status.get("conditions") or []:
                if c.get("status") == "True" and c.get("type") in ("Complete", "Failed"):
                    ok = c["type"] == "Complete"
                    why = c.get("reason") or c.get("message") or ""
                    return ok, "Job completed" if ok else f"Job failed ({why})"
        elif status.get("phase") in ("Succeeded", "Failed"):
            return status["phase"] == "Succeeded", f"Pod {status['phase']}"
        if time.monotonic() >= deadline:
            return False, f"not finished after {timeout:.0f}s"
        time.sleep(_POLL)
