"""The connection a kubeconfig describes: server URL, TLS settings, credentials, and a urllib3 pool.

The common kubeconfigs (client certificate, bearer token or token file, basic auth; CA data or file,
insecure-skip-tls-verify, tls-server-name; no proxy) are read here directly: importing the official client
costs ~0.2 s of start-up (its package imports pydantic and every API module), more than a whole one-object
`kubectl diff`. Anything else — exec plugins, auth providers, proxies, in-cluster service accounts, and any
kubeconfig this reader does not understand — goes to the official loader, which also words every error
(`official`). `Client` (client.py) sends its requests through the `Connection` either way.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml

from gitops_sync.cluster import wire
from gitops_sync.errors import ClusterError

# What the native reader understands; a key outside these sends the kubeconfig to the official loader.
_CLUSTER_KEYS = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "tls-server-name",
        "extensions",
    }
)
_USER_KEYS = frozenset(
    {
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "token",
        "tokenFile",
        "username",
        "password",
        "extensions",
    }
)
_PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


@dataclass
class Connection:
    """Where requests go and how: `headers()` is asked before every request (a token may be refreshed)."""

    host: str
    pool: urllib3.PoolManager
    headers: Callable[[], dict[str, str]]
    close: Callable[[], None]
    loader: str  # "native" or "official": which one read the kubeconfig (logged at debug level, tested)


def connect(
    kubeconfig: str | os.PathLike[str] | None,
    context: str | None,
    pool_size: int,
    *,
    document: dict[str, Any] | None = None,
) -> Connection:
    """The connection of `context` (default: the current one) in `kubeconfig` (default: $KUBECONFIG, a list
    of files, or ~/.kube/config; in a pod without either, the service account), or in `document` (a
    kubeconfig already parsed, e.g. from a Secret: then no file, variable or service account is read for
    it). Raises ClusterError."""
    if document is not None:
        try:
            entries: _Merged | None = entries_of([(document, Path("."))])
        except (ValueError, TypeError, KeyError, AttributeError):
            entries = None  # the official loader says what is wrong with it
        in_cluster = False
    else:
        in_cluster = kubeconfig is None and not os.environ.get("KUBECONFIG") and _in_cluster()
        entries = None if in_cluster else _readable_entries(kubeconfig)
    native = None if in_cluster or any(os.environ.get(v) for v in _PROXY_VARIABLES) else _native(entries, context)
    if native is not None:
        conn = native(pool_size)
    else:
        conn = official(kubeconfig, context, pool_size, in_cluster=in_cluster, document=document)
    wire.install(conn.pool)  # whichever loader made the pool, a write's fence is asked again at the socket
    return conn


def _readable_entries(kubeconfig: str | os.PathLike[str] | None) -> _Merged | None:
    """`read_entries`, None when it cannot: the official loader reads the files again and words the error."""
    try:
        return read_entries(kubeconfig)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError):
        return None


def selected(entries: _Merged, context: str | None) -> tuple[dict[str, Any], _Entry, _Entry] | None:
    """The context `context` (default: the current one) with its cluster and user entries (each with the
    directory of its file), or None when the kubeconfig names no such context."""
    contexts, clusters, users, current = entries
    ctx = contexts.get(context or current or "")
    if not isinstance(ctx, dict):
        return None
    cluster = clusters.get(str(ctx.get("cluster", ""))) or ({}, Path("."))
    user = users.get(str(ctx.get("user", ""))) or ({}, Path("."))
    return ctx, cluster, user


def _native(entries: _Merged | None, context: str | None) -> Callable[[int], Connection] | None:
    """A factory of the connection, or None when the official loader must read this kubeconfig."""
    try:
        if entries is None:
            return None
        chosen = selected(entries, context)
        if chosen is None:
            return None
        _ctx, (cluster, cluster_dir), (user, user_dir) = chosen
        if not isinstance(cluster, dict) or not isinstance(user, dict):
            return None
        if set(cluster) - _CLUSTER_KEYS or set(user) - _USER_KEYS or not _str(cluster.get("server")):
            return None
        server = str(cluster["server"]).rstrip("/")
        if not server.startswith(("https://", "http://")):
            return None
        auth = _auth_header(user, user_dir)
        tls = _ssl_context(cluster, cluster_dir, user, user_dir) if server.startswith("https://") else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError, ssl.SSLError, yaml.YAMLError):
        return None  # the official loader reads it again and says what is wrong in its own words
    sni = _str(cluster.get("tls-server-name"))

    def build(pool_size: int) -> Connection:
        pool_args: dict[str, Any] = {"maxsize": pool_size, "retries": False}
        if tls is not None:
            pool_args["ssl_context"] = tls
            pool_args["cert_reqs"] = "CERT_REQUIRED" if tls.verify_mode == ssl.CERT_REQUIRED else "CERT_NONE"
            if sni:
                pool_args["server_hostname"] = sni
        pool = urllib3.PoolManager(**pool_args)
        fixed = {"Authorization": auth} if auth else {}
        return Connection(server, pool, lambda: dict(fixed), pool.clear, "native")

    return build


def context_namespace(kubeconfig: str | os.PathLike[str] | None, context: str | None) -> str | None:
    """The `namespace` of the kubeconfig context (default: the current one), as kubectl reads it; None when
    it names none or the kubeconfig cannot be read here (the connection's own errors say why, later)."""
    try:
        entries = read_entries(kubeconfig)
        if entries is None:
            return None
        contexts, _, _, current = entries
        ctx = contexts.get(context or current)
        namespace = ctx.get("namespace") if isinstance(ctx, dict) else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError):
        return None
    return namespace if isinstance(namespace, str) and namespace else None


_Entry = tuple[Any, Path]  # an entry of a kubeconfig section, with the directory of its file
_Entries = dict[str, _Entry]
_Merged = tuple[dict[str, Any], _Entries, _Entries, str]  # contexts, clusters, users, current context


def read_entries(kubeconfig: str | os.PathLike[str] | None) -> _Merged | None:
    """contexts, clusters and users (each with the directory of its file, for relative paths) and the current
    context, merged over the files as kubectl does: the first file naming an entry wins. Raises OSError or
    yaml.YAMLError as read; None when no file holds a kubeconfig."""
    given = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG") or "~/.kube/config"
    paths = [Path(p).expanduser() for p in given.split(os.pathsep) if p]
    docs: list[tuple[Any, Path]] = []
    for path in paths:
        if path.is_file():
            docs.append(
                (yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)), path.parent)
            )
    return entries_of(docs)


def entries_of(docs: list[tuple[Any, Path]]) -> _Merged | None:
    """The merged entries of parsed kubeconfig documents (None: none, or one that is not a mapping)."""
    found: dict[str, _Entries] = {"contexts": {}, "clusters": {}, "users": {}}
    inner = {"contexts": "context", "clusters": "cluster", "users": "user"}
    current = ""
    read = 0
    for doc, base in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            return None
        read += 1
        current = current or str(doc.get("current-context") or "")
        for section, key in inner.items():
            for item in doc.get(section) or []:
                found[section].setdefault(str(item["name"]), (item.get(key) or {}, base))
    if not read:
        return None
    contexts = {name: value for name, (value, _) in found["contexts"].items()}
    return contexts, found["clusters"], found["users"], current


def _auth_header(user: dict[str, Any], base: Path) -> str | None:
    token = _str(user.get("token"))
    if not token and _str(user.get("tokenFile")):
        token = _resolve(base, user["tokenFile"]).read_text().strip()
    if token:
        return f"Bearer {token}"
    if _str(user.get("username")) and _str(user.get("password")):
        pair = f"{user['username']}:{user['password']}".encode()
        return "Basic " + base64.b64encode(pair).decode()
    return None


def _ssl_context(cluster: dict[str, Any], cluster_dir: Path, user: dict[str, Any], user_dir: Path) -> ssl.SSLContext:
    # Trust what the kubeconfig names and nothing else, as kubectl does: with a CA given, the system's CA
    # store is not consulted (loading it costs ~15 ms of every command's start-up for nothing).
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # certificate and host name checked
    if cluster.get("insecure-skip-tls-verify") is True:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif _str(cluster.get("certificate-authority-data")):
        ctx.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif _str(cluster.get("certificate-authority")):
        ctx.load_verify_locations(cafile=str(_resolve(cluster_dir, cluster["certificate-authority"])))
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)  # a public endpoint: the system's CAs
    cert = _pem(user, "client-certificate", user_dir)
    key = _pem(user, "client-key", user_dir)
    if cert and key:
        # ssl loads a certificate chain from files only: written to a private directory and removed at once.
        with tempfile.TemporaryDirectory(prefix="gitops-sync-tls-") as tmp:
            cert_file, key_file = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
            for file, data in ((cert_file, cert), (key_file, key)):
                fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
            ctx.load_cert_chain(str(cert_file), str(key_file))
    elif cert or key:
        raise ValueError("a client certificate without its key, or a key without its certificate")
    return ctx


def _pem(user: dict[str, Any], name: str, base: Path) -> bytes | None:
    if _str(user.get(f"{name}-data")):
        return base64.b64decode(user[f"{name}-data"])
    if _str(user.get(name)):
        return _resolve(base, user[name]).read_bytes()
    return None


def _resolve(base: Path, name: str) -> Path:
    path = Path(name).expanduser()
    return path if path.is_absolute() else base / path


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def official(
    kubeconfig: str | os.PathLike[str] | None,
    context: str | None,
    pool_size: int,
    *,
    in_cluster: bool,
    document: dict[str, Any] | None = None,
) -> Connection:
    """The official client's loader: every kind of kubeconfig (exec plugins refresh their token through
    `headers()`), the in-cluster service account, proxies from the environment."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    configuration = k8s_client.Configuration()
    try:
        if in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        elif document is not None:
            k8s_config.load_kube_config_from_dict(
                document, context=context, client_configuration=configuration, persist_config=False
            )
        else:
            k8s_config.load_kube_config(
                config_file=str(kubeconfig) if kubeconfig else None,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except (k8s_config.ConfigException, OSError, TypeError, ValueError) as exc:
        where = (
            "(given as data)"
            if document is not None
            else kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        )
        raise ClusterError(f"cannot load kubeconfig {where}: {exc}") from exc
    configuration.connection_pool_maxsize = pool_size
    configuration.retries = 0
    api = k8s_client.ApiClient(configuration)

    def headers() -> dict[str, str]:
        _, _, out, _, _ = api.param_serialize(
            method="GET", resource_path="/", header_params={}, auth_settings=["BearerToken"]
        )
        return dict(out)

    return Connection(str(configuration.host), api.rest_client.pool_manager, headers, api.close, "official")


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )
