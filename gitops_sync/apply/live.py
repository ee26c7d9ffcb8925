"""Read the live state of every desired object, as the planner and the applier need it.

One LIST per collection with many targets, a GET for each of the rest, concurrently. The `LiveMap` goes to
`apply.Applier` (what to send, and the report's field-level drift) and, in the daemon, is what the watch
cache answers instead.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from gitops_sync.apply.pool import each
from gitops_sync.cluster.client import Client
from gitops_sync.errors import ForbiddenError, NotFoundError, UnauthorizedError
from gitops_sync.log import get_logger
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest, ObjectKey

log = get_logger(__name__)

LiveMap = dict[ObjectKey, Manifest | None]

# Collections with at least this many targets are read with one LIST instead of a GET each.
_LIST_THRESHOLD = 4


def fetch_live(client: Client, targets: Sequence[Target], *, concurrency: int) -> LiveMap:
    """Live state of every target: one LIST per busy collection, GETs for the rest, concurrently.

    A refused LIST falls back to GETs; a refused GET leaves that one object absent. A LIST answered 404
    reads a collection the API server does not serve yet (custom resources whose CRD is in the same source,
    created by this pass): none of its objects exists, as a GET of each would say.
    """
    by_collection: dict[str, list[Target]] = defaultdict(list)
    for t in targets:
        by_collection[t.collection].append(t)
    live: LiveMap = {t.key: None for t in targets}

    def read(collection: str) -> None:
        group = by_collection[collection]
        if len(group) >= _LIST_THRESHOLD:
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
