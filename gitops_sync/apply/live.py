"""Read the live state of every desired object, as the planner and the applier need it.

One LIST per collection with many targets, a GET for each of the rest, concurrently. The `LiveMap` goes to
`apply.Applier` (what to send, and the report's field-level drift) and, in the daemon, is what the watch
cache answers instead.

A LIST reads every object of the collection, ours or not; a GET only the one asked for. When the caller
knows how many objects a collection holds (the daemon: its watch cache counts them), a collection far
bigger than what is wanted of it is read with GETs: in a namespace shared by 1,000 sources of 4 objects,
each source listing the namespace read O(N^2) objects over a cold start (BENCHMARKS-fleet.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from gitops_sync.apply.pool import each
from gitops_sync.cluster.client import Client
from gitops_sync.errors import ForbiddenError, NotFoundError, UnauthorizedError
from gitops_sync.log import get_logger
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest, ObjectKey

log = get_logger(__name__)

LiveMap = dict[ObjectKey, Manifest | None]
# How many objects the collection of a target holds (its kind in its namespace), None when not known.
CollectionSize = Callable[[Target], int | None]

# Collections with at least this many targets are read with one LIST instead of a GET each...
_LIST_THRESHOLD = 4
# ...unless the collection is known to hold more than this many objects per target: then a GET each.
_LIST_MAX_RATIO = 16


def uses_list(wanted: int, size: int | None) -> bool:
    """One LIST for `wanted` targets of a collection holding `size` objects (None: unknown), or a GET each."""
    return wanted >= _LIST_THRESHOLD and (size is None or size <= _LIST_MAX_RATIO * wanted)


def fetch_live(
    client: Client, targets: Sequence[Target], *, concurrency: int, sizes: CollectionSize | None = None
) -> LiveMap:
    """Live state of every target: one LIST per busy collection, GETs for the rest, concurrently.

    `sizes` (the daemon's watch cache) says how big a collection is: one far bigger than its targets is
    read with GETs (`uses_list`). A refused LIST falls back to GETs; a refused GET leaves that one object
    absent. A LIST answered 404 reads a collection the API server does not serve yet (custom resources
    whose CRD is in the same source, created by this pass): none of its objects exists, as a GET of each
    would say.
    """
    by_collection: dict[str, list[Target]] = defaultdict(list)
    for t in targets:
        by_collection[t.collection].append(t)
    live: LiveMap = {t.key: None for t in targets}

    def read(collection: str) -> None:
        group = by_collection[collection]
        if uses_list(len(group), sizes(group[0]) if sizes is not None else None):
            try:
                items = client.list_collection(collection).items
            except ForbiddenError:
                pass
            except NotFoundError:
                return  # not served (yet): every target stays absent
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
                live[t.key] = client.get_or_none(t.path)
            except (UnauthorizedError, ForbiddenError) as exc:
                # Namespaced RBAC: plan the object as absent, so its apply fails with the server's own
                # message in its entry while every other object converges.
                log.info("read refused; planning as absent", object=str(t.key), error=str(exc))

    each(read, list(by_collection), concurrency=concurrency)
    return live
