"""One GitSync as the fleet runs it: its record (`Source`), its API client, its view of the shared queue,
and how both are built (`SourceFactory`).

The registry (registry.py) keeps one `Source` per GitSync; the scheduler hands its keys to a worker that
runs its `SourceReconciler`; the status writer writes what its snapshot says. Every write of a source is
fenced by `SourceFactory.may_write`, asked with the record's own `token`: a pass in flight stops writing
the moment its GitSync is rebuilt, suspended, switched to detect-only or deleted without prune.
"""

from __future__ import annotations

import functools
import itertools
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gitops_sync.cluster.client import Client
from gitops_sync.cluster.discovery import Discovery
from gitops_sync.conventions import ConflictPolicy
from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet.chart_credentials import ChartSecrets
from gitops_sync.daemon.fleet.clusters import RemoteCluster, RemoteClusters
from gitops_sync.daemon.fleet.credentials import SecretCredentials, SigningKeys, tenant_without_secret
from gitops_sync.daemon.fleet.gitsync import GitSync, InvalidSpec
from gitops_sync.daemon.fleet.keys import DecryptionKeys
from gitops_sync.daemon.fleet.status import Deletion
from gitops_sync.daemon.process.controller import DaemonOptions, FencedClient
from gitops_sync.daemon.reconcile.access import ReadAccess
from gitops_sync.daemon.reconcile.reconciler import Shared, SourceReconciler
from gitops_sync.daemon.reconcile.reporter import QueueKey
from gitops_sync.daemon.runtime.queue import WorkQueue
from gitops_sync.engine import Engine, SourceOptions
from gitops_sync.resource import Manifest
from gitops_sync.source.credentials import GitCredentials

FleetKey = tuple[str, QueueKey]  # (namespace/name of the GitSync, its key)


class SourceClient(FencedClient):
    """A source's API client: writes fenced on its shard, every request as its ServiceAccount when set.

    With `share`, it sends through that client's connection pool and breaker (one pool for every source:
    a pool each kept ~8 idle TLS connections per source, 1.2 MB of RSS per source at 200 sources) and
    keeps only its fence, its impersonation and its request counters."""

    def __init__(self, *args: Any, impersonate: str = "", share: Client | None = None, **kwargs: Any) -> None:
        if share is not None:  # no pool of its own: the shared one's connection, breaker and rate limit
            kwargs.update(connection=share._conn, breaker=share.breaker, rate_limit=share.rate_limit)
            kwargs.setdefault("timeout", share.timeout)
        super().__init__(*args, **kwargs)
        self.impersonate = impersonate
        self._shared = share is not None

    def close(self) -> None:
        if not self._shared:
            super().close()

    def _prepare(
        self, method: str, path: str, query: Any, content_type: str | None, accept: str | None
    ) -> tuple[str, dict[str, str]]:
        url, headers = super()._prepare(method, path, query, content_type, accept)
        if self.impersonate:
            headers["Impersonate-User"] = self.impersonate
        return url, headers


class Scoped:
    """One source's view of the shared queue: its keys, wrapped as (source, key)."""

    def __init__(self, queue: WorkQueue[FleetKey], ref: str) -> None:
        self.q = queue
        self.ref = ref

    def add(self, key: QueueKey) -> None:
        self.q.add((self.ref, key))

    def add_after(self, key: QueueKey, delay: float) -> None:
        self.q.add_after((self.ref, key), delay)

    def add_rate_limited(self, key: QueueKey) -> float:
        return self.q.add_rate_limited((self.ref, key))

    def forget(self, key: QueueKey) -> None:
        self.q.forget((self.ref, key))

    def failures(self, key: QueueKey) -> int:
        return self.q.failures((self.ref, key))


@dataclass
class Source:
    """What the controller keeps of one GitSync. `gs`, `reconciler`, `client` and `token` are replaced
    only by the registry's owner (the GitSync watch thread, or the shard thread rebuilding it); the rest
    is written by the one worker running the source's pass (or by the watch thread while it is not)."""

    gs: GitSync
    shard: int
    reconciler: SourceReconciler | None
    client: SourceClient | None
    token: int = 0  # this record's identity: the fence of its client asks that it is still the current one
    invalid: str = ""  # why the controller will not act on it (then it has no reconciler)
    reason: str = InvalidSpec.reason  # of `invalid`: InvalidSpec or RepositoryNotAllowed
    announced: bool = False  # the Warning Event saying `invalid` was recorded
    written: dict[str, Any] = field(default_factory=dict)  # the status last written (without times)
    conditions: list[dict[str, Any]] = field(default_factory=list)  # as last written (with times)
    handled: str = ""  # the reconcile request answered in lastHandledReconcileAt
    waiting_for: str = ""
    next_poll: float = 0.0
    deletion: Deletion | None = None  # being deleted, and its objects are not all gone yet
    remote: RemoteCluster | None = None  # its target cluster when not the controller's (spec.kubeConfig)
    unreachable: str = ""  # why its remote cluster did not answer at its last turn ("" = it did)

    def carry(self, old: Source | None) -> Source:
        """Keep what the status writer knew of the record this one replaces (not `written`: the holder of
        the shard may have written since)."""
        if old is not None:
            self.handled, self.conditions = old.handled, old.conditions
        return self

    @property
    def cluster(self) -> str:
        """Its target cluster for /status, metrics, Events and `status.cluster` ("" = the controller's)."""
        return self.remote.name if self.remote is not None else ""


class SourceFactory:
    """Builds the reconciler and clients of one GitSync, fenced by `may_write(ref, token, shard)`."""

    def __init__(
        self,
        opts: DaemonOptions,
        source_options: SourceOptions,
        *,
        share: Client,
        discovery: Discovery,
        shared: Shared,
        queue: WorkQueue[FleetKey],
        may_write: Callable[[str, int, int], bool],
        active: Callable[[int], bool],
        on_loaded: Callable[[str], None],  # the ref of a source that loaded a new desired state
        clock: Callable[[], float] = time.monotonic,
        remotes: RemoteClusters | None = None,
    ) -> None:
        self.opts = opts
        self.remotes = remotes
        self.source_options = source_options
        self.share = share
        self.discovery = discovery
        self.shared = shared
        self.queue = queue
        self.may_write = may_write
        self.active = active
        self.on_loaded = on_loaded
        self.clock = clock
        self._tokens = itertools.count(1)

    def build(self, gs: GitSync, shard: int) -> Source:
        opts, token = self.opts, next(self._tokens)

        def may_write() -> bool:
            return self.may_write(gs.ref, token, shard)

        remote = self._remote(gs)  # KubeConfigError: the caller refuses the GitSync
        share = remote.conn.client if remote is not None else self.share
        client = self._client(gs, may_write, share)
        discovery = remote.conn.discovery if remote is not None else self.discovery
        engine = Engine(client, field_manager=opts.field_manager, concurrency=opts.concurrency, discovery=discovery)
        access = None
        if gs.impersonate:  # its reads of the shared cache are checked as its ServiceAccount (access.py)
            access = ReadAccess(self._client(gs, lambda: True, share), gs.impersonate)  # a review changes nothing
        credentials: Callable[[], GitCredentials | None] | None = None  # None: the controller's own
        if gs.secret_ref:  # read at every fetch, as the GitSync's ServiceAccount when it has one
            reader = self._client(gs, lambda: True, self.share)  # a GET, on the controller's cluster
            credentials = SecretCredentials(reader, gs.namespace, gs.secret_ref, gs.impersonate)
        elif gs.impersonate:  # a tenant without a Secret: none at all, never the controller's
            credentials = functools.partial(tenant_without_secret, gs.namespace, gs.impersonate)
        charts = None
        if gs.chart_credentials:  # read at every pass, as its ServiceAccount when it has one
            reader = self._client(gs, lambda: True, self.share)
            charts = ChartSecrets(reader, gs.namespace, gs.chart_credentials, gs.impersonate)
        r = SourceReconciler(
            gs.source_spec(
                self.source_options,
                debounce=opts.debounce,
                credentials=credentials,
                decryption=self._decryption_keys(gs),
                verify=self._signing_keys(gs),
                chart_credentials=charts,
            ),
            engine=engine,
            queue=Scoped(self.queue, gs.ref),
            shared=self.shared if remote is None else replace(self.shared, cache=remote.cache),
            active=lambda: self.active(shard),
            may_write=may_write,
            field_manager=opts.field_manager,
            subject=(gs.key, gitsync.API_VERSION),
            read_access=access,
            on_loaded=functools.partial(self.on_loaded, gs.ref),
        )
        return Source(
            gs=gs, shard=shard, reconciler=r, client=client, token=token, next_poll=self._due(gs), remote=remote
        )

    def _decryption_keys(self, gs: GitSync) -> DecryptionKeys | None:
        """spec.decryption's SOPS keys: read before every render, as its ServiceAccount when it has one."""
        if gs.decryption is None:
            return None
        return DecryptionKeys(self._client(gs, lambda: True, self.share), gs.namespace, gs.decryption, gs.impersonate)

    def _signing_keys(self, gs: GitSync) -> SigningKeys | None:
        """spec.verify's trusted keys: read at every fetch, as its ServiceAccount when it has one."""
        if gs.verify is None:
            return None
        v, reader = gs.verify, self._client(gs, lambda: True, self.share)
        return SigningKeys(reader, gs.namespace, v.secret, gs.impersonate, commits=v.commits, tags=v.tags)

    def _remote(self, gs: GitSync) -> RemoteCluster | None:
        """The remote cluster of a GitSync with spec.kubeConfig, its Secret read as its ServiceAccount."""
        if gs.kube_config is None or self.remotes is None:
            return None
        return self.remotes.acquire(gs, self._client(gs, lambda: False, self.share))

    def rotated(self, src: Source) -> bool:
        """Its kubeconfig Secret changed since its source was built (read again as its ServiceAccount)."""
        if src.remote is None or self.remotes is None:
            return False
        return self.remotes.rotated(src.gs, src.remote, self._client(src.gs, lambda: False, self.share))

    def release(self, src: Source) -> None:
        """A record dropped or replaced: its client closed, its remote cluster let go (the last one closes it)."""
        if src.client is not None:
            src.client.close()
        if src.remote is not None and self.remotes is not None:
            self.remotes.release(src.remote)
            src.remote = None

    def refused(self, gs: GitSync, shard: int, why: str, reason: str) -> Source:
        """A GitSync the controller will not act on: no reconciler, no client."""
        return Source(
            gs=gs, shard=shard, reconciler=None, client=None, invalid=why, reason=reason, next_poll=self._due(gs)
        )

    def _due(self, gs: GitSync) -> float:
        return self.clock() + first_poll(gs.ref, gs.interval)

    def _client(self, gs: GitSync, may_write: Callable[[], bool], share: Client) -> SourceClient:
        # No Impersonate-Group: for a ServiceAccount user the API server adds its groups itself, and the
        # controller then needs `impersonate` on serviceaccounts only (never on groups: system:masters).
        return SourceClient(
            self.opts.kubeconfig,
            self.opts.context,
            pool_size=1,
            may_write=may_write,
            impersonate=gs.impersonate,
            share=share,
        )


def first_poll(ref: str, interval: float) -> float:
    """Seconds from a source's load to its first Git poll: within the first interval, at a point of its own
    (a hash of its name; never later than one interval), and then every interval. GitSyncs created together
    (a fleet's start, an import) would otherwise all poll in the same second of every interval, and the
    other sources' work wait behind that burst."""
    return interval * zlib.crc32(ref.encode()) / 2**32


def stub_of(obj: Manifest) -> GitSync:
    """A GitSync that could not be parsed, kept to report why in its status."""
    meta = obj.get("metadata") or {}
    ns = str(meta.get("namespace") or "")
    return GitSync(
        namespace=ns,
        name=str(meta.get("name") or ""),
        generation=int(meta.get("generation") or 0),
        uid=str(meta.get("uid") or ""),
        repository="",
        revision=None,
        path=None,
        interval=0.0,
        prune=False,
        self_heal=False,
        policy=ConflictPolicy.REPORT,
        target_namespace=ns,
        service_account="",
        suspend=False,
        depends_on=(),
        wait=False,
        timeout=0.0,
    )


__all__ = ["FleetKey", "Scoped", "Source", "SourceClient", "SourceFactory", "stub_of"]
