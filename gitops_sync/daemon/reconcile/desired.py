"""The desired-state side of one source: fetch and render, its identity, and the last good render.

A `SourceReconciler` (reconciler.py) asks `DesiredSource.load` for a fresh render and keeps acting on
`state` (the last good one) until a new render is both successful and stable; passes compare the live
objects against `state.targets`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gitops_sync import jsoncodec
from gitops_sync.daemon.reconcile.history import tracked_paths
from gitops_sync.engine import PassOptions, SourceOptions, fetch_source, load
from gitops_sync.errors import SourceError
from gitops_sync.log import get_logger
from gitops_sync.plan.masking import Redactor
from gitops_sync.plan.planner import Target
from gitops_sync.rendercache import MemoryStore, RenderCache, Unchanged
from gitops_sync.resource import DesiredObject, ObjectKey
from gitops_sync.source import Checkout, SourceIdentity, identify
from gitops_sync.source.checkout import is_remote
from gitops_sync.source.verify import VerificationFailed

log = get_logger("gitops_sync.daemon")
Loaded = tuple[Checkout, list[DesiredObject], str]  # a render, and its digest: what `DesiredSource.load` returns


@dataclass
class SourceSpec:
    """What a source is: where desired state comes from and how passes treat it."""

    source: SourceOptions
    pass_opts: PassOptions
    self_heal: bool = True
    debounce: float = 0.2
    fight_threshold: int = 3  # another manager taking a field this often within fight_window: yield it
    fight_window: float = 600.0
    autoscaler_wins: bool = True  # yield .spec.replicas to an HPA at once (--git-wins-over-autoscaler: no)


@dataclass
class DesiredState:
    """The last good desired state: what every pass compares against."""

    checkout: Checkout
    targets: list[Target]
    digest: str
    by_key: dict[ObjectKey, Target]
    paths: TrackedPaths

    def scope(self, only: set[ObjectKey] | None) -> list[Target]:
        """The targets of a pass over `only` (None: all of them). A few objects (the watch's usual partial
        pass) are looked up, in key order, rather than found by a walk of every target: at 20,000 objects
        that walk, three times a pass, was most of the ~1,600 partial passes after a cold apply (py-spy)."""
        if only is None:
            return self.targets
        if len(only) * 8 >= len(self.targets):
            return [t for t in self.targets if t.key in only]
        return [self.by_key[k] for k in sorted(only) if k in self.by_key]


class TrackedPaths:
    """The fields whose history is kept (`history.tracked_paths`) of each desired object, worked out at the
    object's first watch event rather than for all of them when the source loads: 20,000 objects took
    seconds there, before the first pass could start, while the watch threads mostly wait on the network.
    Asked by the ownership history (`OwnershipHistory.paths_of`) under its lock, when it first reads a value of
    the object: at its second event, or when a reader asks for its fields."""

    def __init__(self, by_key: Mapping[ObjectKey, Target]) -> None:
        self._by_key = by_key
        self._paths: dict[ObjectKey, list[str]] = {}

    def get(self, key: ObjectKey) -> list[str]:
        """The object's tracked paths; [] for an object Git does not hold."""
        found = self._paths.get(key)
        if found is None:
            target = self._by_key.get(key)
            if target is None:
                return []
            found = self._paths[key] = tracked_paths(target.manifest)
        return found


class DesiredSource:
    """Fetch + render of one repository path, and the quiet-period check of a live work tree."""

    def __init__(self, opts: SourceOptions, debounce: float) -> None:
        self.opts = opts
        self.debounce = debounce
        self.state: DesiredState | None = None
        self.checked = 0.0  # wall time of the last load attempt
        # A local work tree is read while people write to it: a render is acted on (applied, pruned) only
        # once a second read, `debounce` later, gives the same digest. (digest, first seen) until then.
        self._candidate: tuple[str, float] | None = None
        # The last render `load` returned and nobody took yet: the second look finds it in the render cache
        # by digest and gets these objects back rather than a decoded copy (20,000 objects: ~0.5 s and a
        # second copy in memory at every start and every change of a work tree).
        self._unsettled: Loaded | None = None
        self.live_tree = not is_remote(opts.repo) and (opts.revision or "HEAD").strip() == "HEAD"
        # A periodic re-sync of files already rendered skips the render (a commit by its tree, a work tree by
        # its files' content: gitops_sync/rendercache.py).
        self.render_cache = RenderCache(MemoryStore())

    @functools.cached_property
    def identity(self) -> SourceIdentity:
        """What `fetch` derives for every pass (see gitops_sync.source.identity), once, before any fetch."""
        return identify(self.opts.repo, self.opts.path)

    def load(self) -> Loaded | None:
        """Fetch and render (raises what `engine.load` raises): the checkout, the objects and their `digest`;
        None when they are the state already held (and any pending candidate is forgotten). A render served
        from the entry the state was taken from is not even decoded: at 20,000 objects that copy of the
        desired state was the daemon's peak of memory at every full pass (bench case 6). Nor is the render of
        a work tree's second look (`wait_before_acting`) when its entry is the one the first look read: those
        objects are given back."""
        self.checked = time.time()
        held = self.state.digest if self.state is not None else None
        unsettled, self._unsettled = self._unsettled, None
        known: list[str] = []

        def holds(rev: str, entry: str) -> bool:
            found = digest(rev, [], entry)
            known[:] = [found]
            return found == held or (unsettled is not None and found == unsettled[2])

        try:
            checkout, objects = self.render(holds)
        except Unchanged:
            if unsettled is not None and known == [unsettled[2]] and unsettled[2] != held:
                self._unsettled = unsettled
                return unsettled
            self._candidate = None
            return None
        new = digest(checkout.revision, objects, self.render_cache.digest)
        if new == held:
            self._candidate = None
            return None
        if self.live_tree:
            self._unsettled = (checkout, objects, new)
        return checkout, objects, new

    def render(self, held: Callable[[str, str], bool]) -> tuple[Checkout, list[DesiredObject]]:
        """`engine.load` through this source's render cache (`held`: see `RenderCache.render`)."""
        return load(self.opts, self.render_cache, held)

    @property
    def settling(self) -> bool:
        """A new render is waiting for its second look (wait_before_acting): what is held is not Git's yet."""
        return self._candidate is not None

    def wait_before_acting(self, digest: str) -> float:
        """0 when a new render may be acted on, else seconds until it should be read again.

        A file caught half-written renders fewer objects (or fewer fields); acting on it would prune or
        strip what the finished file still has. A commit of a remote (or a pinned --revision) is
        immutable and needs no second look.
        """
        if not self.live_tree:
            self._unsettled = None
            return 0.0
        now, quiet = time.monotonic(), max(self.debounce, 0.05)
        if self._candidate is not None and self._candidate[0] == digest:
            waited = now - self._candidate[1]
            if waited >= quiet:
                self._candidate = self._unsettled = None
                return 0.0
            return quiet - waited
        self._candidate = (digest, now)
        log.info(
            "source changed; reading it again after the quiet period before acting on it",
            digest=digest[:12],
            seconds=quiet,
        )
        return quiet

    def failed_revision(self, exc: BaseException) -> str:
        """The commit a failed load was at: known when the fetch worked and the render failed."""
        if isinstance(exc, VerificationFailed):
            return exc.revision  # fetched, and refused before it was rendered
        if isinstance(exc, SourceError):
            return ""
        with contextlib.suppress(Exception):
            return fetch_source(self.opts).revision
        return ""

    def redactor(self) -> Redactor:
        """The Secret values of the last good state: a broken commit most likely keeps most of them."""
        return Redactor(t.manifest for t in self.state.targets) if self.state else Redactor()


def digest(revision: str, objects: list[DesiredObject], entry: str | None = None) -> str:
    """Identity of a desired state: the revision and every rendered manifest (a dirty tree changes it); or,
    for objects of a render cache entry, the digest of that entry's payload (`entry`: the same objects, as
    stored), which needs no walk of the objects and is known before they are decoded."""
    h = hashlib.sha256(revision.encode())
    if entry is not None:
        h.update(b"\0render cache entry\0" + entry.encode())
        return h.hexdigest()
    # orjson: the daemon computes it twice at start (a work tree is read twice) and at every poll; json.dumps
    # of 20,000 manifests took seconds. Compared only within the process, so the spelling may change.
    for text in sorted(jsoncodec.dumps(o.manifest, sort_keys=True, default=str) for o in objects):
        h.update(text)
    return h.hexdigest()


__all__ = ["DesiredSource", "DesiredState", "SourceSpec", "TrackedPaths", "digest"]
