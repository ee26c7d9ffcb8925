"""What both controllers share: the daemon's options, the fenced client and the process around the work.

`Process` owns what no source owns (the watch cache, the queue, HTTP, Events, the clients) and registers
them with its `Manager` (runtime/manager.py), which starts and stops every component in declared groups;
`single/` runs one source on it, `fleet/` every GitSync, each adding its workers, triggers and Leases.
Writes go through `FencedClient`: it refuses every non-dry-run request unless this replica may write
(self-heal mode, leader, not shutting down), so even a pass that started while leading cannot write once
leadership is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from gitops_sync.cluster.client import Client
from gitops_sync.cluster.lease import (
    LeaderConfig,
    default_identity,
)
from gitops_sync.conventions import FIELD_MANAGER
from gitops_sync.daemon.reconcile.conditions import ClusterProbe, Condition
from gitops_sync.daemon.reconcile.reconciler import Shared
from gitops_sync.daemon.reconcile.triggers import WebhookResult, verify_webhook
from gitops_sync.daemon.runtime.auth import KubernetesAuth
from gitops_sync.daemon.runtime.cache import EventType, WatchCache
from gitops_sync.daemon.runtime.events import EventRecorder
from gitops_sync.daemon.runtime.manager import Group, Manager
from gitops_sync.daemon.runtime.metrics import Metrics
from gitops_sync.daemon.runtime.queue import Backoff, WorkQueue
from gitops_sync.daemon.runtime.supervisor import Supervisor
from gitops_sync.daemon.serving.http import Endpoints, HttpServer
from gitops_sync.daemon.serving.tls import Certificates
from gitops_sync.engine import PassOptions, SourceOptions
from gitops_sync.log import get_logger
from gitops_sync.resource import Manifest, ObjectKey

log = get_logger("gitops_sync.daemon")


@dataclass
class DaemonOptions:
    source: SourceOptions
    pass_opts: PassOptions = field(default_factory=PassOptions)
    self_heal: bool = True
    interval: float = 60.0
    jitter: float = 0.1
    resync: float = 600.0
    debounce: float = 0.2
    http_addr: str = ":8080"
    http_auth: str = "none"  # none | kubernetes (auth.py)
    tls_files: tuple[Path, Path] | None = None  # (certificate, key): HTTPS only on http_addr (serving/tls.py)
    webhook_secret: bytes | None = None
    kubeconfig: Path | None = None
    context: str | None = None
    field_manager: str = FIELD_MANAGER
    concurrency: int = 8
    leader_elect: bool = False
    leader_namespace: str | None = None
    identity: str = field(default_factory=default_identity)
    leader: LeaderConfig = field(default_factory=LeaderConfig)
    shutdown_grace: float = 10.0
    max_backoff: float = 300.0  # cap of the retry delay of a failing pass or object (--max-backoff)
    watch_backoff_cap: float = 8.0
    probe_interval: float = 5.0  # GET /readyz of the API server this often (every second while failing)
    probe_timeout: float = 2.0
    fight_threshold: int = 3  # another manager taking a field this often within fight_window: yield it
    fight_window: float = 600.0
    autoscaler_wins: bool = True  # yield .spec.replicas to an HPA at once (--git-wins-over-autoscaler: no)
    # The fleet controller (run without --repo): fleet/.
    watch_namespace: str | None = None  # only GitSyncs in this namespace (default: all)
    shards: int = 1  # sources are split into this many shards, one Lease each (with leader_elect)
    max_shards: int = 0  # at most this many shards held by one replica (0 = all)
    workers: int = 4  # sources reconciled at the same time
    # Local paths (and file:// URLs) a GitSync may name: none by default (source/allow.py).
    allow_local_repositories: tuple[Path, ...] = ()


class FencedClient(Client):
    """A Client that refuses writes (anything but reads and dry runs) while `may_write()` is false.

    Asked twice for every write: before the request is made, and in the connection right before each
    block of its bytes goes to the socket (cluster/wire.py), so a replica frozen anywhere in between, or a
    request queued in the apply pool when the fence closes, sends nothing once its Lease deadline passed.
    """

    def __init__(self, *args: Any, may_write: Callable[[], bool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.may_write = may_write

    def request_status(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        # `request` goes through here too: one fence for every write (a dry run, in the query or in a
        # DELETE's DeleteOptions, is a read). A fence of the caller's own is asked as well.
        own = kwargs.pop("fence", None)
        kwargs["fence"] = self.may_write if own is None else lambda: self.may_write() and own()
        return super().request_status(method, path, **kwargs)


K = TypeVar("K", bound=Hashable)
QUEUE_BACKOFF_BASE = 0.05  # the first retry delay of a failing key; doubles up to --max-backoff
OnWatch = Callable[[EventType, ObjectKey | None, Manifest | None], None]


class Process(Generic[K]):
    """What the one-source `Daemon` and the GitSync `Fleet` run on alike: metrics, the side clients, the
    work queue (keys `K`), the watch cache, the Event recorder, the supervisor, the cluster condition and
    the `Manager` that starts and stops them in their groups. Each side client has a pool of its own so
    that none queues behind another: Events and Leases (`aux`), watches, reviews (unfenced: a TokenReview
    writes nothing) and the reachability probe (one connection that must not wait behind requests hanging
    on the main pool). A controller adds its own components (workers, triggers, Leases) to `manager`."""

    def __init__(self, opts: DaemonOptions, *, on_watch: OnWatch) -> None:
        self.opts = opts
        self.metrics = Metrics()
        self._abandon = False
        self.aux = Client(opts.kubeconfig, opts.context, pool_size=4, timeout=10)
        self.watch_client = Client(opts.kubeconfig, opts.context, pool_size=64)
        self.auth_client = Client(opts.kubeconfig, opts.context, pool_size=8, timeout=5)
        self.probe_client = Client(
            opts.kubeconfig, opts.context, pool_size=1, timeout=opts.probe_timeout, probe_timeout=opts.probe_timeout
        )
        self.queue: WorkQueue[K] = WorkQueue(
            backoff_base=QUEUE_BACKOFF_BASE, backoff_cap=opts.max_backoff, on_depth=self.metrics.queue_depth.set
        )
        self.backoff = Backoff(QUEUE_BACKOFF_BASE, opts.max_backoff)  # the queue's: what a retry will wait
        self.cache = WatchCache(
            self.watch_client,
            on_event=on_watch,
            on_restart=self._on_watch_restart,
            backoff_cap=opts.watch_backoff_cap,
        )
        self.events = EventRecorder(self.aux, instance=opts.identity, on_drop=self.metrics.events_dropped.inc)
        self.supervisor = Supervisor(on_restart=lambda name: self.metrics.thread_restarts.labels(name).inc())
        self.manager = Manager(self.supervisor)
        self.cluster_condition = Condition("cluster")
        self.failure = ""  # set by `fail`: `gitops-sync run` stops and exits 2 with it

    def fail(self, message: str) -> None:
        """A condition no retry or restart fixes and under which the process must not act (the installed
        CRD would prune a field it reads): `gitops-sync run` stops it and exits 2 with `message`."""
        self.failure = self.failure or message

    @property
    def _stopping(self) -> bool:
        return self.manager.stopping

    def _http_server(
        self,
        *,
        ready: Callable[[], tuple[bool, str]],
        metrics: Callable[[], bytes],
        status: Callable[..., dict[str, Any]],
        history: Callable[[str, str, str, str], dict[str, list[dict[str, Any]]]],
        on_push: Callable[[], None],
        tenant_resource: tuple[str, str] | None = None,
    ) -> HttpServer:
        """/healthz /readyz /metrics /status, the page (`history`: one object's field history), and the
        Git webhook (a verified push calls `on_push`)."""
        auth = KubernetesAuth(self.auth_client).check if self.opts.http_auth == "kubernetes" else None
        endpoints = Endpoints(
            healthy=self.healthy,
            ready=ready,
            metrics=metrics,
            status=status,
            webhook=self._webhook(on_push),
            history=history,
            tenant_resource=tenant_resource,
        )
        certificates = Certificates(*self.opts.tls_files) if self.opts.tls_files else None
        return HttpServer(self.opts.http_addr, endpoints, auth=auth, certificates=certificates)

    def _webhook(self, on_push: Callable[[], None]) -> Callable[[dict[str, str], bytes], WebhookResult]:
        """The Git webhook of both controllers: a verified push calls `on_push` (it enqueues a look at Git)."""

        def hook(headers: dict[str, str], body: bytes) -> WebhookResult:
            result = verify_webhook(headers, body, self.opts.webhook_secret)
            if result.ok:
                event = next((v for k, v in headers.items() if k.lower() in ("x-github-event", "x-gitlab-event")), "")
                log.info("webhook: checking the source", provider=result.provider, hook_event=event)
                on_push()
            else:
                log.warning("webhook refused", reason=result.reason, provider=result.provider or None)
            return result

        return hook

    def _components(
        self,
        http: HttpServer,
        probe: ClusterProbe,
        clients: Callable[[], list[Client]],
        *,
        events_timeout: Callable[[], float],
    ) -> None:
        """What every controller runs besides its own: its clients, HTTP, Events, the watch cache, the
        cluster probe and the supervisor's checks. Stop order is the reverse of the groups (manager.py)."""
        m = self.manager
        m.add(Group.CLIENTS, "clients", stop=lambda: self._close_clients(*clients()))
        m.add(Group.SERVING, "http", start=http.start, stop=http.stop)
        m.add(Group.EVENTS, "events", stop=lambda: self.events.stop(timeout=events_timeout()))
        m.add(Group.CACHES, "watch-cache", stop=self.cache.stop)
        m.spawn(Group.TRIGGERS, "cluster-probe", probe.run, stop=probe.stop)
        m.add(Group.SUPERVISION, "supervisor", start=self._watch_shared, stop=self.supervisor.stop)

    @property
    def port(self) -> int:
        return self.http.port

    def wait(self, timeout: float | None = None) -> bool:
        return self.manager.wait(timeout)

    def _watch_shared(self) -> None:
        """The supervisor revives the watches and reports a stopped Event recorder."""
        self.supervisor.watch("watches", self.cache.dead, revive=self.cache.revive)
        self.supervisor.watch("events", lambda: "" if self.events.alive() else "Event recorder stopped")

    def _shared(self, probe: ClusterProbe, *, gauges: bool) -> Shared:
        """What every source's reconciler uses of this process; `gauges`: one source per process, whose
        figures are the process's gauges."""
        return Shared(
            cache=self.cache,
            events=self.events,
            metrics=self.metrics,
            probe=probe,
            stopping=lambda: self._stopping,
            delay_for=self.backoff.delay_for,
            gauges=gauges,
        )

    def _close_clients(self, *more: Client) -> None:
        for c in (self.aux, self.watch_client, self.auth_client, self.probe_client, *more):
            c.close()

    def _on_watch_restart(self, resource: str, reason: str) -> None:
        self.metrics.watch_restarts.labels(resource, reason).inc()
        if reason == "error":  # a broken watch is the first sign of an outage: probe now, not in 5 s
            self.probe.poke()

    def healthy(self) -> tuple[bool, str]:
        """Liveness: fails only when a background loop is dead for good (a restart would help).

        An unreachable API server or a broken source is not a liveness failure: restarting the
        process fixes neither; /readyz reports those."""
        if self._stopping:
            return True, "ok (shutting down)"
        dead = self.supervisor.dead()
        if dead:
            return False, "dead: " + "; ".join(dead)
        return True, "ok"

    probe: ClusterProbe  # the controller's: it decides what a change of reachability sets off
    http: HttpServer  # the controller's, from `_http_server`
