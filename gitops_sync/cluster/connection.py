"""One target cluster's connection bundle: its own client (connection pool), discovery cache, circuit breaker
and rate limit, and who the cluster is (`ClusterIdentity`), apart from every other cluster's.

A `ClusterConnection` is what a pass against one cluster needs (the CLI's `sync --context a --context b`
makes one per context; the fleet one per target cluster: daemon/fleet/clusters.py). Nothing in it is shared with another
connection, so a cluster that is down or hung (SIGSTOP) trips only its own breaker and holds only its own
pool's sockets. A kubeconfig may come as a file or as data (a Secret's bytes); one that is not `trusted`
(a tenant's) is refused when it would make this process run a command or read a local file
(`check_untrusted`). `Connections` shares one connection among the users of one kubeconfig and closes it
when none is left (the fleet's per-cluster pool). The identity goes to the inventory parent
(apply/inventory.py), which refuses to prune through a connection that reaches another cluster than the one
it recorded.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from gitops_sync.cluster import kubeconfig as _kubeconfig
from gitops_sync.cluster.breaker import Breaker
from gitops_sync.cluster.client import Client
from gitops_sync.cluster.discovery import Discovery
from gitops_sync.cluster.throttle import RateLimit
from gitops_sync.errors import ClusterError, ForbiddenError, NotFoundError, UnauthorizedError

# What a kubeconfig that is not trusted may hold: the server, inline certificates and credentials. Anything
# else is refused, a key this list does not know too (a new kubeconfig field is refused until judged safe).
_UNTRUSTED_CLUSTER_KEYS = frozenset(
    {"server", "certificate-authority-data", "insecure-skip-tls-verify", "tls-server-name", "extensions"}
)
_UNTRUSTED_USER_KEYS = frozenset(
    {"token", "client-certificate-data", "client-key-data", "username", "password", "extensions"}
)
# Why a known key is refused, in the words of the message.
_RUNS_A_COMMAND = "runs a command on the controller's machine"
_READS_A_FILE = "reads a file of the controller's machine"
_REFUSED_WHY = {
    "exec": _RUNS_A_COMMAND,
    "auth-provider": "runs a command or reads files of the controller's machine",
    "client-certificate": _READS_A_FILE,
    "client-key": _READS_A_FILE,
    "tokenFile": _READS_A_FILE,
    "certificate-authority": _READS_A_FILE,
}

KUBE_SYSTEM = "/api/v1/namespaces/kube-system"


class UntrustedKubeconfigError(ClusterError):
    """A kubeconfig that is not trusted (a tenant's) would run a command or read a local file: refused."""


@dataclass(frozen=True)
class ClusterIdentity:
    """Who a cluster is: its API server URL (as the kubeconfig names it) and the UID of its `kube-system`
    namespace, which lives as long as the cluster's etcd (an etcd restore keeps it; a new cluster, even at
    the same URL, has another). `uid` is "" when this connection may not read kube-system."""

    server: str
    uid: str

    @property
    def text(self) -> str:
        """`<server>#<uid>` (or the server alone): one string for identities, Leases and reports."""
        return f"{self.server}#{self.uid}" if self.uid else self.server

    def describe(self) -> str:
        return f"{self.server} (kube-system uid {self.uid or 'unknown'})"


def check_untrusted(document: Any, context: str | None) -> None:
    """Refuse (UntrustedKubeconfigError) a kubeconfig whose context would make this process run a command
    (exec plugin, auth provider) or read one of its files (client-certificate, client-key, tokenFile,
    certificate-authority paths), or that holds anything but a server and inline data. Names keys, never values."""
    where = f"context {context!r}" if context else "its current context"
    try:
        entries = _kubeconfig.entries_of([(document, Path("."))])
        chosen = _kubeconfig.selected(entries, context) if entries is not None else None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise UntrustedKubeconfigError(f"kubeconfig cannot be read: {type(exc).__name__}") from None
    if chosen is None:
        raise UntrustedKubeconfigError(f"kubeconfig has no {where}")
    _ctx, (cluster, _), (user, _) = chosen
    if not isinstance(cluster, dict) or not isinstance(user, dict):
        raise UntrustedKubeconfigError(f"kubeconfig {where}: its cluster or user is not a mapping")
    refused = [f"cluster.{k}" for k in sorted(set(cluster) - _UNTRUSTED_CLUSTER_KEYS)]
    refused += [f"user.{k}" for k in sorted(set(user) - _UNTRUSTED_USER_KEYS)]
    if refused:
        reasons = "; ".join(f"{k} ({_REFUSED_WHY.get(k.split('.', 1)[1], 'not inline data')})" for k in refused)
        raise UntrustedKubeconfigError(
            f"kubeconfig {where} is refused: {reasons}. A kubeconfig given by a tenant may hold only a server "
            "and inline data (certificate-authority-data, client-certificate-data, client-key-data, token, "
            "username/password)"
        )
    server = cluster.get("server")
    if not isinstance(server, str) or urlsplit(server).scheme not in ("https", "http"):
        raise UntrustedKubeconfigError(f"kubeconfig {where}: the server must be an https:// (or http://) URL")


class ClusterConnection:
    """One cluster's client, discovery cache, breaker and rate limit, and its identity (read once)."""

    def __init__(self, client: Client, name: str = "") -> None:
        self.client = client
        self.name = name or client.server  # the context, or the API server's host:port: for reports
        self.discovery = Discovery(client)
        self._lock = threading.Lock()
        self._identity: ClusterIdentity | None = None

    @classmethod
    def open(
        cls,
        kubeconfig: bytes | str | os.PathLike[str] | None = None,
        context: str | None = None,
        *,
        trusted: bool = True,
        name: str = "",
        pool_size: int = 32,
        timeout: float = 30.0,
        qps: float | None = None,
        burst: int = 0,
    ) -> ClusterConnection:
        """A connection from a kubeconfig file (`str`/path; None: $KUBECONFIG, ~/.kube/config, in-cluster) or
        its bytes. Not `trusted` (a tenant's kubeconfig): read once, as data only, and refused when it would
        run a command or read a local file (`check_untrusted`); never $KUBECONFIG nor the service account.
        `qps`: requests per second to this cluster at most (`burst` at once; default twice qps)."""
        document: Any = None
        if isinstance(kubeconfig, bytes):
            document = _parse(kubeconfig)
        elif not trusted:
            if kubeconfig is None:
                raise UntrustedKubeconfigError("an untrusted connection needs its kubeconfig given (as data or a file)")
            try:
                document = _parse(Path(kubeconfig).read_bytes())
            except OSError as exc:
                raise ClusterError(f"cannot read kubeconfig {kubeconfig}: {exc.strerror}") from exc
        as_data = isinstance(kubeconfig, bytes) or not trusted
        if as_data and not isinstance(document, dict):  # never the ambient kubeconfig in its place
            raise ClusterError("kubeconfig given as data is empty or not a mapping")
        if not trusted:
            check_untrusted(document, context)
        path = None if isinstance(kubeconfig, bytes) or as_data else kubeconfig
        conn = _kubeconfig.connect(path, context, pool_size, document=document)
        limit = RateLimit(qps, burst or max(1, int(qps * 2))) if qps else None
        client = Client(pool_size=pool_size, timeout=timeout, connection=conn, rate_limit=limit)
        return cls(client, name or context or "")

    @property
    def breaker(self) -> Breaker:
        return self.client.breaker

    @property
    def rate_limit(self) -> RateLimit | None:
        return self.client.rate_limit

    def identity(self) -> ClusterIdentity:
        """The cluster's identity: one GET of the kube-system namespace, the first time it is asked; a refused
        read (403/401/404) leaves the UID unknown (""). ClusterError when the server cannot answer (not kept:
        asked again next time)."""
        with self._lock:
            if self._identity is None:
                try:
                    uid = str(((self.client.get(KUBE_SYSTEM) or {}).get("metadata") or {}).get("uid") or "")
                except (ForbiddenError, UnauthorizedError, NotFoundError):
                    uid = ""
                self._identity = ClusterIdentity(self.client.host.rstrip("/"), uid)
            return self._identity

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> ClusterConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parse(data: bytes) -> Any:
    try:
        return yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise ClusterError(f"kubeconfig given as data is not YAML{at}") from None


class Connections:
    """The open connections of a process that targets many clusters (the fleet): one per kubeconfig (its
    bytes, context and trust), shared by every user of that kubeconfig, closed when the last one lets go.

    A rotated Secret (other bytes) opens a new connection; the old one closes once nobody holds it. `open`
    is how a connection is made (tests pass their own)."""

    def __init__(self, open: Callable[..., ClusterConnection] = ClusterConnection.open) -> None:
        self._open = open
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str, bool], tuple[ClusterConnection, int]] = {}

    def acquire(self, kubeconfig: bytes, context: str | None = None, *, trusted: bool = False) -> ClusterConnection:
        """The connection of this kubeconfig, opened on first use (refusals as `ClusterConnection.open`)."""
        key = (hashlib.sha256(kubeconfig).hexdigest(), context or "", trusted)
        with self._lock:
            found = self._held.get(key)
            if found is None:
                conn = self._open(kubeconfig, context, trusted=trusted)
                self._held[key] = (conn, 1)
                return conn
            self._held[key] = (found[0], found[1] + 1)
            return found[0]

    def release(self, conn: ClusterConnection) -> None:
        """One user fewer; the last one closes it (its pool's sockets, its watches' connections)."""
        with self._lock:
            for key, (held, users) in self._held.items():
                if held is conn:
                    if users > 1:
                        self._held[key] = (held, users - 1)
                        return
                    del self._held[key]
                    break
            else:
                return
        conn.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)


__all__ = ["ClusterConnection", "ClusterIdentity", "Connections", "UntrustedKubeconfigError", "check_untrusted"]
