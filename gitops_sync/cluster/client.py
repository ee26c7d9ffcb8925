"""Raw JSON access to the API server.

The official client is used only for what it does well — reading kubeconfig (certificates, tokens,
exec plugins) and owning the urllib3 pool. Requests and responses stay bytes/dicts: decoding into
typed models costs ~10x more and the dynamic client's watch cannot resume (see the facts file).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import structlog
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from gitops_sync import __version__
from gitops_sync.errors import ApiError, ClusterError, ConflictError, NotFoundError

log = structlog.get_logger(__name__)

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

_Query = Mapping[str, str | int | bool | None]


@dataclass
class RequestStats:
    """Counts what this process asked of the API server, so a no-op pass can prove it wrote nothing."""

    reads: int = 0
    writes: int = 0
    dry_runs: int = 0

    def count(self, method: str, query: _Query | None, body: Any = None) -> None:
        if method in ("GET", "HEAD", "OPTIONS"):
            self.reads += 1
        elif (query and query.get("dryRun")) or (isinstance(body, dict) and body.get("dryRun")):
            self.dry_runs += 1
        else:
            self.writes += 1


class Client:
    """One API server connection: kubeconfig/in-cluster auth, a sized urllib3 pool, JSON in and out."""

    def __init__(
        self,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        *,
        pool_size: int = 32,
        timeout: float = 30.0,
    ) -> None:
        configuration = k8s_client.Configuration()
        try:
            if kubeconfig is None and not os.environ.get("KUBECONFIG") and _in_cluster():
                k8s_config.load_incluster_config(client_configuration=configuration)
            else:
                k8s_config.load_kube_config(
                    config_file=str(kubeconfig) if kubeconfig else None,
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except (k8s_config.ConfigException, OSError, TypeError, ValueError) as exc:
            where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise ClusterError(f"cannot load kubeconfig {where}: {exc}") from exc
        configuration.connection_pool_maxsize = pool_size
        configuration.retries = 0
        self._api = k8s_client.ApiClient(configuration)
        self._api.user_agent = f"gitops-sync/{__version__}"
        self.host = configuration.host
        self.timeout = timeout
        self.stats = RequestStats()
        self._stats_lock = threading.Lock()

    @property
    def server(self) -> str:
        """`host:port` of the API server, for error messages."""
        return urlsplit(self.host).netloc or self.host

    def close(self) -> None:
        self._api.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------

    def _prepare(
        self, method: str, path: str, query: _Query | None, content_type: str | None, accept: str | None
    ) -> tuple[str, dict[str, str]]:
        headers: dict[str, str] = {"Accept": accept or "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        _, url, headers, _, _ = self._api.param_serialize(
            method=method, resource_path=path, header_params=headers, auth_settings=["BearerToken"]
        )
        if query:
            pairs = {k: _query_value(v) for k, v in query.items() if v is not None and v != ""}
            if pairs:
                url += "?" + urlencode(pairs, safe=",=/")
        return url, headers

    def request(
        self,
        method: str,
        path: str,
        *,
        query: _Query | None = None,
        body: Any = None,
        content_type: str | None = None,
        accept: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request and decode the JSON answer; non-2xx raises a typed ApiError."""
        return self.request_status(
            method, path, query=query, body=body, content_type=content_type, accept=accept, timeout=timeout
        )[1]

    def request_status(
        self,
        method: str,
        path: str,
        *,
        query: _Query | None = None,
        body: Any = None,
        content_type: str | None = None,
        accept: str | None = None,
        timeout: float | None = None,
    ) -> tuple[int, Any]:
        """`request`, plus the HTTP status: 201 tells an apply that created the object from one that updated it."""
        url, headers = self._prepare(method, path, query, content_type, accept)
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        with self._stats_lock:
            self.stats.count(method, query, body)
        started = time.monotonic()
        try:
            resp = self._api.rest_client.pool_manager.request(
                method,
                url,
                body=data,
                headers=headers,
                timeout=urllib3.Timeout(total=timeout or self.timeout),
                preload_content=True,
                retries=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(f"API server {self.server} unreachable: {_reason(exc)}") from exc
        # --log-level debug: one line per request (the query names dry runs and the field manager).
        log.debug(
            "request",
            method=method,
            path=path,
            query=query,
            status=resp.status,
            seconds=round(time.monotonic() - started, 4),
        )
        if resp.status >= 400:
            raise _api_error(resp.status, resp.data, method, path)
        return int(resp.status), (json.loads(resp.data) if resp.data else None)

    def stream_lines(self, path: str, *, query: _Query | None = None, timeout: float | None = None) -> Iterator[bytes]:
        """A streaming GET (watch): yields one JSON line per event until the server closes."""
        url, headers = self._prepare("GET", path, query, None, None)
        with self._stats_lock:
            self.stats.reads += 1
        try:
            resp = self._api.rest_client.pool_manager.request(
                "GET",
                url,
                headers=headers,
                timeout=urllib3.Timeout(connect=10, read=timeout),
                preload_content=False,
                retries=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(f"API server {self.server} unreachable: {_reason(exc)}") from exc
        try:
            if resp.status >= 400:
                raise _api_error(resp.status, resp.read(), "GET", path)
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield line
            if buf.strip():
                yield buf
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(f"watch {path} on {self.server} broken: {_reason(exc)}") from exc
        finally:
            resp.release_conn()

    # -- convenience ------------------------------------------------------------------------

    def get(self, path: str, query: _Query | None = None) -> Any:
        return self.request("GET", path, query=query)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.request("GET", path)
        except NotFoundError:
            return None


def object_path(base: str, namespace: str | None, plural: str, name: str | None = None) -> str:
    """URL of a collection or an object: `/apis/apps/v1/namespaces/ns/deployments/name`."""
    parts = [base]
    if namespace:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(plural)
    if name:
        parts.append(quote(name, safe=""))
    return "/".join(parts)


def _query_value(v: str | int | bool) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _reason(exc: BaseException) -> str:
    inner = getattr(exc, "reason", None)
    return str(inner or exc)


def _api_error(status: int, data: bytes, method: str, path: str) -> ApiError:
    body: dict[str, Any] = {}
    try:
        decoded = json.loads(data) if data else {}
        if isinstance(decoded, dict):
            body = decoded
    except ValueError:
        pass
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or data[:300].decode(errors="replace") or f"{method} {path}")
    if status == 404:
        return NotFoundError(status, reason or "NotFound", message, body)
    if status == 409:
        return ConflictError(status, reason or "Conflict", message, body)
    return ApiError(status, reason or "Error", message, body)


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )
