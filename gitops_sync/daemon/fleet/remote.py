"""The fleet controller's side of remote target clusters: a remote source's turn asks whether its cluster
answers (`answers`), watch events of a remote cluster go to that cluster's sources (`on_event`), a cluster
that stops or starts answering re-queues its sources (`changed`), and the scheduler groups passes by cluster
(`cluster_of`).

The controller (controller.py) wires it between the registry, the queue and the status writer; the cluster
connections themselves are clusters.py's. What a turn finds goes to the source's record (`unreachable`),
which the status writer turns into Ready=False reason=ClusterUnreachable (status.py `with_cluster`).
"""

from __future__ import annotations

from collections.abc import Callable

from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet.registry import Registry
from gitops_sync.daemon.fleet.sources import FleetKey, Source
from gitops_sync.daemon.fleet.status import CLUSTER_UNREACHABLE
from gitops_sync.daemon.reconcile.reporter import FULL, SOURCE, QueueKey
from gitops_sync.daemon.runtime.cache import EventType
from gitops_sync.daemon.runtime.events import WARNING, EventRecorder, EventSpec
from gitops_sync.daemon.runtime.manager import Requests
from gitops_sync.daemon.runtime.queue import WorkQueue
from gitops_sync.log import get_logger
from gitops_sync.resource import Manifest, ObjectKey

log = get_logger("gitops_sync.daemon")


class RemoteSide:
    """Threads: workers (`answers`, `cluster_of` from the dispatcher), the remote caches' threads (`on_event`),
    the remote probe thread (`changed`). Holds no state of its own: the registry and the records do."""

    def __init__(self, registry: Registry, queue: WorkQueue[FleetKey], events: EventRecorder) -> None:
        self.registry = registry
        self.queue = queue
        self.events = events

    def answers(self, ref: str, src: Source, asks: Requests[QueueKey], write: Callable[[str], object]) -> bool:
        """A remote source's cluster answers (its identity recorded for the inventory); else its status says
        ClusterUnreachable naming the cluster (a Warning Event when that starts), no pass, another look in
        5 s. A down or hung cluster fails here at once once its breaker is open: it holds no worker."""
        rc = src.remote
        assert rc is not None and src.reconciler is not None
        why = rc.reachable()
        if why != src.unreachable:
            src.unreachable = why
            if why:
                log.warning("target cluster unreachable", gitsync=ref, cluster=rc.name, error=why)
                self.events.record(
                    EventSpec(
                        key=src.gs.key,
                        api_version=gitsync.API_VERSION,
                        reason=CLUSTER_UNREACHABLE,
                        message=why,
                        type=WARNING,
                        series=CLUSTER_UNREACHABLE,
                        uid=src.gs.uid,
                    )
                )
            else:
                log.info("target cluster reachable again", gitsync=ref, cluster=rc.name)
                asks.add(SOURCE)
                asks.add(FULL)
        if why:
            write(ref)
            asks.add_after(FULL, 5.0)
            return False
        src.reconciler.engine.cluster_id = rc.uid  # the inventory records (and checks) this cluster
        return True

    def cluster_of(self, ref: str) -> str:
        """The key of the remote cluster a source targets ("" = the controller's): the scheduler's group."""
        src = self.registry.get(ref)
        return src.remote.key if src is not None and src.remote is not None else ""

    def changed(self, cluster: str) -> None:
        """A remote cluster stopped or started answering: its GitSyncs take a turn (status, or a pass)."""
        for ref in self.registry.refs_of_cluster(cluster):
            self.queue.add((ref, FULL))

    def on_event(self, cluster: str, etype: EventType, key: ObjectKey | None, obj: Manifest | None) -> None:
        """A watch event of a remote cluster: to the sources of that cluster that want the object."""
        if etype is EventType.RECOVERED:
            for ref in self.registry.refs_of_cluster(cluster):
                self.queue.add((ref, SOURCE))
                self.queue.add((ref, FULL))
            return
        if key is not None:
            for _ref, r in self.registry.wanting(key, cluster):
                r.on_watch(etype, key, obj)


__all__ = ["RemoteSide"]
