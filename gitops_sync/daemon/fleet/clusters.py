"""The remote clusters GitSyncs target (`spec.kubeConfig.secretRef`): one connection and watch cache each.

The source factory (sources.py) asks `RemoteClusters.acquire(gs)` for the cluster of a GitSync: the
kubeconfig is read from its Secret as the GitSync's ServiceAccount (a tenant cannot name another tenant's
Secret), opened untrusted (no exec plugin, no local file: cluster/connection.py `check_untrusted`) and shared
through `Connections` by every GitSync whose Secret holds the same bytes. Each remote cluster has its own
`ClusterConnection` (pool, discovery, breaker) and its own `WatchCache`, whose events go to the controller
with the cluster's key; the cache stops and the connection closes when the last GitSync lets go (a rotated
Secret opens a new one). The controller (controller.py) asks `reachable` before a remote pass: a cluster that
is down, hung or refusing the credentials marks only its GitSyncs (`ClusterUnreachable`).
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gitops_sync.cluster.client import Client
from gitops_sync.cluster.connection import ClusterConnection, ClusterIdentity, Connections
from gitops_sync.daemon.fleet.gitsync import GitSync
from gitops_sync.daemon.fleet.status import CLUSTER_UNREACHABLE
from gitops_sync.daemon.runtime.cache import EventType, WatchCache
from gitops_sync.errors import ApiError, ClusterError, ForbiddenError, NotFoundError
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest, ObjectKey

REMOTE_TIMEOUT = 10.0  # one request to a remote cluster: a hung one costs a pass this, then its breaker opens

OnRemoteEvent = Callable[[str, EventType, ObjectKey | None, Manifest | None], None]


class KubeConfigError(Exception):
    """The GitSync's kubeconfig cannot be used: its Secret unreadable (forbidden, missing, no such key) or
    the kubeconfig refused. The message names the Secret and the key, never a value."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


KUBECONFIG_FORBIDDEN = "KubeConfigForbidden"  # the GitSync's ServiceAccount may not read the Secret
KUBECONFIG_NOT_FOUND = "KubeConfigNotFound"  # no such Secret, or no such key in it
KUBECONFIG_REFUSED = "KubeConfigRefused"  # an exec plugin, a file, not a kubeconfig
KUBECONFIG_REASONS = (KUBECONFIG_FORBIDDEN, KUBECONFIG_NOT_FOUND, KUBECONFIG_REFUSED)


@dataclass
class RemoteCluster:
    """One target cluster: its connection, its watch cache, the key its events are routed by."""

    key: str  # the Connections key of its kubeconfig: GitSyncs with this key share everything here
    conn: ClusterConnection
    cache: WatchCache
    digest: str = ""  # of its kubeconfig's bytes: a rotated Secret holds others
    users: int = 0
    _identity: ClusterIdentity | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """The cluster in messages, labels and `status.cluster`: its API server URL (plus the kube-system UID
        once read)."""
        return self._identity.text if self._identity is not None else self.conn.client.host.rstrip("/")

    @property
    def server(self) -> str:
        return self.conn.client.host.rstrip("/")

    def reachable(self) -> str:
        """ "" when the cluster answers (its identity read on the way), else why not. While its breaker is open,
        at most one re-probe every `retry_after` seconds (the breaker's own half-open rule)."""
        try:
            self.conn.client.breaker.check()
            if self._identity is None or not self._identity.uid:
                self._identity = self.conn.identity()
        except ClusterError as exc:
            return f"cluster {self.server} is unreachable: {exc}"
        return ""

    def probe(self) -> bool:
        """One look at the cluster (the probe thread): GET /readyz; a failure opens its breaker (so its
        GitSyncs' turns fail at once), a success while open closes it. True when it answers."""
        b = self.conn.client.breaker
        if b.is_down:
            try:
                b.check()  # the half-open re-probe (at most every retry_after)
            except ClusterError:
                return False
            return True
        problem = self.conn.client.probe()
        if problem is not None:
            b.failed(f"probe: {problem}")
        return not b.is_down

    @property
    def uid(self) -> str:
        return self._identity.uid if self._identity is not None else ""


class RemoteClusters:
    """The remote clusters of the fleet, by kubeconfig. Threads: the GitSync watch (acquire, release), the
    shard thread (acquire on a rebuild), workers (`reachable`), HTTP (`status`). Its lock guards `_held`."""

    def __init__(
        self,
        local: Client,
        on_event: OnRemoteEvent,
        *,
        on_change: Callable[[str], None] = lambda key: None,
        backoff_cap: float = 8.0,
        interval: float = 5.0,
    ) -> None:
        self.local = local  # the controller's cluster: where the Secrets are
        self._on_event = on_event
        self._on_change = on_change  # a cluster stopped or started answering: its GitSyncs look again
        self.interval = interval
        self._stop = threading.Event()
        self._answering: dict[str, bool] = {}
        self._backoff_cap = backoff_cap
        self._connections = Connections(self._open)
        self._lock = threading.Lock()
        self._held: dict[int, RemoteCluster] = {}  # id(conn) -> its bundle

    @staticmethod
    def _open(kubeconfig: bytes, context: str | None, *, trusted: bool) -> ClusterConnection:
        return ClusterConnection.open(kubeconfig, context, trusted=trusted, timeout=REMOTE_TIMEOUT)

    def kubeconfig_of(self, gs: GitSync, read: Client) -> bytes:
        """The kubeconfig bytes of `gs`'s Secret, read through `read` (impersonating its ServiceAccount)."""
        ref = gs.kube_config
        assert ref is not None
        where = ref.describe(gs.namespace)
        try:
            secret = read.get(f"/api/v1/namespaces/{gs.namespace}/secrets/{ref.secret}") or {}
        except ForbiddenError:
            who = gs.impersonate or "the controller"
            raise KubeConfigError(
                f"spec.kubeConfig: {who} may not read {where} (a GitSync reads its kubeconfig as its ServiceAccount)",
                KUBECONFIG_FORBIDDEN,
            ) from None
        except NotFoundError:
            raise KubeConfigError(f"spec.kubeConfig: {where} does not exist", KUBECONFIG_NOT_FOUND) from None
        except ApiError as exc:
            raise KubeConfigError(f"spec.kubeConfig: cannot read {where}: {exc}", KUBECONFIG_NOT_FOUND) from None
        data = secret.get("data") or {}
        for key in ref.keys:
            if key in data:
                try:
                    return base64.b64decode(str(data[key]), validate=True)
                except ValueError:
                    raise KubeConfigError(
                        f"spec.kubeConfig: key {key!r} of {where} is not base64", KUBECONFIG_REFUSED
                    ) from None
        raise KubeConfigError(
            f"spec.kubeConfig: {where} has no key {' or '.join(repr(k) for k in ref.keys)}", KUBECONFIG_NOT_FOUND
        )

    def acquire(self, gs: GitSync, read: Client) -> RemoteCluster:
        """The remote cluster of `gs` (KubeConfigError when its Secret or kubeconfig cannot be used)."""
        data = self.kubeconfig_of(gs, read)
        ref = gs.kube_config
        assert ref is not None
        try:
            conn = self._connections.acquire(data, None, trusted=False)
        except ClusterError as exc:  # names keys, never values (connection.py)
            key = ref.key or "value"
            raise KubeConfigError(
                f"spec.kubeConfig: the kubeconfig in {ref.describe(gs.namespace)} (key {key!r}): {exc}",
                KUBECONFIG_REFUSED,
            ) from None
        with self._lock:
            rc = self._held.get(id(conn))
            if rc is None:
                ckey = f"{conn.client.host.rstrip('/')}@{id(conn):x}"
                cache = WatchCache(
                    conn.client,
                    on_event=lambda et, k, o: self._on_event(ckey, et, k, o),
                    backoff_cap=self._backoff_cap,
                )
                rc = RemoteCluster(ckey, conn, cache, digest(data))
                self._held[id(conn)] = rc
            rc.users += 1
            return rc

    def rotated(self, gs: GitSync, rc: RemoteCluster, read: Client) -> bool:
        """The GitSync's Secret holds another kubeconfig than `rc`'s now (or cannot be read any more): its
        source is to be built again (a new connection; the old one closes when its last user goes)."""
        try:
            return digest(self.kubeconfig_of(gs, read)) != rc.digest
        except KubeConfigError:
            return True

    def release(self, rc: RemoteCluster) -> None:
        """One GitSync fewer; the last one stops the cluster's watches and closes its connection."""
        with self._lock:
            rc.users -= 1
            last = rc.users <= 0
            if last:
                self._held.pop(id(rc.conn), None)
                self._answering.pop(rc.key, None)
        if last:
            rc.cache.stop()
        self._connections.release(rc.conn)

    def set_interest(self, by_cluster: Mapping[str, Mapping[ObjectKey, Target]]) -> None:
        for rc in self.clusters():
            rc.cache.set_interest(by_cluster.get(rc.key, {}))

    def clusters(self) -> list[RemoteCluster]:
        with self._lock:
            return list(self._held.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def stop(self) -> None:
        for rc in self.clusters():
            rc.cache.stop()

    def run(self) -> None:
        """The probe thread: every `interval` s (every second while one fails) each remote cluster is
        looked at; a change of answering goes to `on_change` (the controller re-queues that cluster's
        GitSyncs: their status says ClusterUnreachable, or they run again), so a cluster nobody's pass
        touches (a hung one with only Git polls due) is still noticed, and recovers by itself."""
        while not self._stop.is_set():
            failing = False
            for rc in self.clusters():
                ok = rc.probe()
                failing = failing or not ok
                if self._answering.get(rc.key, True) != ok:
                    self._answering[rc.key] = ok
                    self._on_change(rc.key)
            self._stop.wait(1.0 if failing else self.interval)

    def stop_probing(self) -> None:
        self._stop.set()

    def status(self) -> list[dict[str, object]]:
        """Each remote cluster's health for /status: its server, identity, breaker, users and watches."""
        out: list[dict[str, object]] = []
        for rc in self.clusters():
            b = rc.conn.client.breaker
            out.append(
                {
                    "cluster": rc.name,
                    "server": rc.server,
                    "uid": rc.uid,
                    "reachable": not b.is_down,
                    "error": b.reason,
                    "trips": b.trips,
                    "gitsyncs": rc.users,
                    "watches": rc.cache.status(),
                }
            )
        return out


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


__all__ = [
    "CLUSTER_UNREACHABLE",
    "KUBECONFIG_FORBIDDEN",
    "KUBECONFIG_NOT_FOUND",
    "KUBECONFIG_REASONS",
    "KUBECONFIG_REFUSED",
    "KubeConfigError",
    "RemoteCluster",
    "RemoteClusters",
]
