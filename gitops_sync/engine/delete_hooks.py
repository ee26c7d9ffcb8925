"""Helm `pre-delete` / `post-delete` hooks: run when a release is deleted, which for gitops-sync is when its objects
are pruned: the release left Git (a pass with prune), or the source itself is deleted (a GitSync's finalizer,
Engine.collect).

By then the hooks are no longer rendered (the chart is gone from Git), so each pass that records the inventory
keeps the delete hooks of what it rendered in the inventory parent (conventions.DELETE_HOOKS: gzip + base64 of
`{release: [manifest, ...]}`, the manifests resolved, namespace filled). A release is the directory that rendered
the hook: the chart's (or kustomization's) directory, or for a hook in a plain manifest the file's directory;
it has left Git when no object and no hook of the render comes from it.

- A pass that prunes (whole, not dry, nothing failed before prune) runs the `pre-delete` hooks of the releases
  that left Git right before prune, and their `post-delete` hooks after it (when prune left nothing undone),
  each event's hooks by weight, with the delete policies of engine/hooks.py. A failing `pre-delete` hook stops the
  pass before prune (nothing pruned, the revision not recorded as applied): the next pass runs the release's delete
  hooks again. A failing `post-delete` hook: the objects are gone, the revision is not recorded as applied, and the
  next pass runs the release's delete hooks again (they are still recorded).
- Prune off: never run; a release that left Git stays recorded, so its hooks run when a prune removes it.
- The source deleted (Engine.collect, prune): every recorded release's `pre-delete` hooks before its members are
  pruned, `post-delete` after, then the record is cleared (a second collection, WaitForTermination's, runs none).
- Secrets are never recorded (the parent is a ConfigMap anyone who lists ConfigMaps reads).
"""

from __future__ import annotations

import base64
import gzip
import json
import posixpath
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gitops_sync.apply import inventory
from gitops_sync.conventions import ATTEMPTED_REVISION, DELETE_HOOKS, SOURCE
from gitops_sync.engine import hooks
from gitops_sync.log import get_logger
from gitops_sync.plan.changeset import ChangeSet
from gitops_sync.resource import DesiredObject, Manifest, is_secret

if TYPE_CHECKING:
    from gitops_sync.apply.inventory import Inventory
    from gitops_sync.engine.core import Engine
    from gitops_sync.engine.state import PassState

log = get_logger(__name__)

PRE, POST = "pre-delete", "post-delete"
MAX_RECORD = 128 * 1024  # bytes of the annotation: an ApplySet parent's annotations may hold 256 KiB in all

Record = dict[str, list[Manifest]]


def release_of(origin: str) -> str:
    """The release an object of the render belongs to: the directory a tool rendered it from (its origin up to
    ` (helm)`, ` (chart …)`, ` (kustomize)`), else the directory of its manifest file."""
    if " (" in origin:
        return origin.split(" (", 1)[0] or "."
    return posixpath.dirname(origin.split("#", 1)[0]) or "."


def encode(record: Mapping[str, list[Manifest]]) -> str:
    if not record:
        return ""
    text = json.dumps({k: record[k] for k in sorted(record)}, sort_keys=True, separators=(",", ":"))
    return base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()


def decode(text: str) -> Record:
    """The recorded hooks; {} for none or a record that cannot be read (logged: its hooks will not run)."""
    if not text:
        return {}
    try:
        doc = json.loads(gzip.decompress(base64.b64decode(text, validate=True)))
    except (ValueError, OSError, EOFError):
        log.warning("the inventory's record of delete hooks cannot be read; they will not run", annotation=DELETE_HOOKS)
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(k): [m for m in v if isinstance(m, dict)] for k, v in doc.items() if isinstance(v, list)}


def recorded(inv: Inventory) -> Record:
    return decode(inv.recorded.get(DELETE_HOOKS, ""))


def rendered(engine: Engine, s: PassState) -> Record:
    """The delete hooks of this pass's render, resolved (namespace filled), by release; Secrets left out."""
    out: Record = {}
    for obj in s.checkout.hooks:
        if not isinstance(obj, DesiredObject) or not hooks.events_of(obj.manifest) & {PRE, POST}:
            continue
        if is_secret(obj.manifest):
            log.warning("a Secret delete hook is not recorded (the inventory is a ConfigMap): it will not run")
            continue
        for t in hooks.resolved(engine, [obj], s.opts.namespace):
            out.setdefault(release_of(obj.origin), []).append(t.manifest)
    return out


def releases(s: PassState) -> set[str]:
    """The releases this pass renders anything of (an object or a hook)."""
    objects = [t.origin for t in s.wanted] + [o.origin for o in s.checkout.hooks if isinstance(o, DesiredObject)]
    return {release_of(origin) for origin in objects}


def leaving(s: PassState) -> Record:
    """Recorded releases that left Git: nothing of the render comes from them any more."""
    present = releases(s)
    return {r: m for r, m in recorded(s.inv).items() if r not in present}


def to_record(engine: Engine, s: PassState, *, applied: bool) -> str | None:
    """The annotation this pass's inventory write records (None: keep what is recorded, nothing to do). Before
    the applies, and with prune off: what was recorded and what is rendered now; after a clean pass that
    pruned: what is rendered now (the releases that left Git were deleted, their hooks ran)."""
    old = recorded(s.inv)
    if not old and not s.checkout.hooks:
        return None
    now = rendered(engine, s)
    record = now if applied and s.opts.prune else {**old, **now}
    text = encode(record)
    if len(text) > MAX_RECORD:
        log.warning("delete hooks not recorded: over the size limit; the record is kept as it was", bytes=len(text))
        return None
    return text


def run_leaving(engine: Engine, s: PassState, event: str) -> None:
    """The `event` hooks of every release that left Git; a failure stops the pass (s.stopped). After the
    post-delete hooks of a pass that records nothing (an empty render: record_applied does not run), their
    releases leave the record here, or every later pass would run them again."""
    gone = leaving(s)
    if not gone:
        return
    s.stopped = not run(engine, s.cs, gone, event, s.opts.timeout)
    if event == POST and not s.stopped and not s.records:
        _write(engine, s.inv, {r: m for r, m in recorded(s.inv).items() if r not in gone})


def run(engine: Engine, cs: ChangeSet, record: Record, event: str, timeout: float) -> bool:
    """The `event` hooks of the releases in `record`, release by release (sorted), each release's by weight."""
    for release in sorted(record):
        objects = [DesiredObject(m, f"{release} (recorded delete hook)") for m in record[release]]
        targets = hooks.resolved(engine, objects, "default")  # recorded resolved: their namespace is set
        if not hooks.run_hooks(engine, cs, hooks.of_event(targets, event), event, timeout):
            return False
    return True


def before_collect(engine: Engine, cs: ChangeSet, inv: Inventory, timeout: float) -> bool:
    """The source is deleted: the pre-delete hooks of every recorded release; False when one failed (nothing
    may be pruned: the caller retries the whole deletion)."""
    return run(engine, cs, recorded(inv), PRE, timeout)


def after_collect(engine: Engine, cs: ChangeSet, inv: Inventory, timeout: float, *, keep_parent: bool) -> None:
    """Its members pruned: the post-delete hooks of every recorded release, then (the parent staying, for a
    collection that waits) the record cleared, so the collection that deletes the parent runs none again."""
    if run(engine, cs, recorded(inv), POST, timeout) and keep_parent:
        _write(engine, inv, {})


def _write(engine: Engine, inv: Inventory, record: Record) -> None:
    """The parent records `record` as its delete hooks, the rest as it was."""
    inventory.save(
        engine.client,
        inv,
        set(inv.group_kinds),
        set(inv.namespaces),
        field_manager=engine.field_manager,
        revision=inv.recorded.get(ATTEMPTED_REVISION, ""),
        source=inv.recorded.get(SOURCE, ""),
        delete_hooks=encode(record),
    )


def any_recorded(inv: Inventory) -> bool:
    return bool(inv.recorded.get(DELETE_HOOKS))


__all__ = ["POST", "PRE", "any_recorded", "decode", "encode", "leaving", "recorded", "release_of", "run", "to_record"]
