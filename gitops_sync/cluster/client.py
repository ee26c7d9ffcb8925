"""Raw JSON access to the API server.

The official client is used only for what it does well — reading kubeconfig (certificates, tokens,
exec plugins) and owning the urllib3 pool. Requests and responses stay bytes/dicts: decoding into
typed models costs ~10x more and the dynamic client's watch cannot resume (see the facts file).

A `Breaker` per client (breaker.py) turns "the API server is down or hung" into an answer in
microseconds. A 429 with `Retry-After` is sent again after the time asked (throttle.py), within the
request's own timeout and the command's deadline; once the retries or the time are used up the 429 is
raised as it came (TooManyRequestsError), the retries named in its message. Every request is counted
(stats.py). Answers go up as dicts, failures as typed errors (gitops_sync.errors: one class per status).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from gitops_sync import __version__, jsoncodec
from gitops_sync.cluster import wire
from gitops_sync.cluster.breaker import Breaker
from gitops_sync.cluster.stats import Query, RequestStats, is_dry_run, is_write
from gitops_sync.cluster.throttle import MAX_RETRIES, RateLimit, throttle_wait
from gitops_sync.errors import (
    ApiError,
    ApiTimeoutError,
    ApiUnavailableError,
    ClusterError,
    FencedError,
    NotFoundError,
    error_for_status,
)
from gitops_sync.log import get_logger
from gitops_sync.resource import resource_version

if TYPE_CHECKING:
    import urllib3

    from gitops_sync.cluster.kubeconfig import Connection

log = get_logger(__name__)

# What other modules import from here (the breaker, the throttle and the counts live next door).
__all__ = [
    "APPLY_PATCH",
    "JSON_PATCH",
    "MAX_RETRIES",
    "MERGE_PATCH",
    "Breaker",
    "Client",
    "Listing",
    "RequestStats",
    "is_dry_run",
    "is_write",
    "object_path",
    "throttle_wait",
]

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Listing:
    """What `Client.list_collection` read: the items of every page, and the list's resourceVersion.

    `more` is true when the listing stopped at `pages` with pages left (the items are then a prefix).
    """

    items: list[Any]
    resource_version: str
    more: bool = False


@dataclass(frozen=True)
class _Outgoing:
    """One request as it leaves (and leaves again after a 429): what is sent and what it counts as."""

    method: str
    path: str
    query: Query | None
    body: Any  # as given, for the counts (a DeleteOptions body may say dryRun)
    url: str
    headers: dict[str, str]
    data: bytes | None  # the body as sent
    gate: wire.Fence | None  # a write's fence, asked again at the socket


class Client:
    """One API server connection: kubeconfig/in-cluster auth, a sized urllib3 pool, JSON in and out."""

    def __init__(
        self,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        *,
        pool_size: int = 32,
        timeout: float = 30.0,
        probe_timeout: float = 3.0,
        breaker: Breaker | None = None,
        user_agent: str = f"gitops-sync/{__version__}",
        max_retries: int = MAX_RETRIES,
        sleep: Callable[[float], None] = time.sleep,
        connection: Connection | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        from gitops_sync.cluster import kubeconfig as _kubeconfig  # urllib3: not for commands without a cluster

        # `connection`: made by the caller (a kubeconfig given as data: cluster/connection.py)
        self._conn = connection or _kubeconfig.connect(kubeconfig, context, pool_size)
        # requests per second to this API server, client-side (None: as many as the pool carries)
        self.rate_limit = rate_limit
        self.host = self._conn.host
        self.user_agent = user_agent  # the audit log tells our requests apart by it
        self.timeout = timeout
        self.probe_timeout = probe_timeout
        self.breaker = breaker or Breaker(self.probe)
        self.max_retries = max_retries  # retries of a throttled (429 + Retry-After) request
        self._sleep = sleep
        self.deadline: float | None = None  # monotonic time after which no request is sent (`set_deadline`)
        self._deadline_s = 0.0
        self.stats = RequestStats()
        self._stats_lock = threading.Lock()
        # Called with (method, path) before any write request (not a read, not a dry run) is sent; it may
        # block (a `sync` takes its source's Lease there: cluster/lease.py) or raise to refuse the write.
        self.before_write: Callable[[str, str], None] | None = None

    def set_deadline(self, seconds: float | None, *, started: float | None = None) -> None:
        """No request leaves after `started + seconds`; in-flight ones are cut at that moment."""
        self._deadline_s = seconds or 0.0
        self.deadline = None if seconds is None else (started or time.monotonic()) + seconds

    def _budget(self, timeout: float | None, until: float | None = None) -> float:
        """This request's timeout: its own or the client's, never past the deadline (raises once past)
        nor past `until` (where the time of a throttled request's retries ends)."""
        budget = timeout or self.timeout
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise ApiUnavailableError(f"the deadline of {self._deadline_s:g}s passed")
            budget = min(budget, left)
        if until is not None:
            budget = min(budget, until - time.monotonic())
        return budget

    def probe(self) -> str | None:
        """GET /readyz with a short timeout: None when the server answers (any non-5xx), else why not."""
        import urllib3

        url, headers = self._prepare("GET", "/readyz", None, None, "text/plain")
        try:
            resp = self._conn.pool.request(
                "GET", url, headers=headers, timeout=urllib3.Timeout(total=self.probe_timeout), retries=False
            )
        except urllib3.exceptions.NewConnectionError as exc:  # a ConnectTimeoutError subclass, but refused is not slow
            return _reason(exc)
        except urllib3.exceptions.TimeoutError:
            return f"no answer within {self.probe_timeout:g}s"
        except urllib3.exceptions.HTTPError as exc:
            return _reason(exc)
        if resp.status >= 500:
            return f"/readyz answered {resp.status}: {resp.data[:200].decode(errors='replace').strip()}"
        return None

    @property
    def server(self) -> str:
        """`host:port` of the API server, for error messages."""
        return urlsplit(self.host).netloc or self.host

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------

    def _prepare(
        self, method: str, path: str, query: Query | None, content_type: str | None, accept: str | None
    ) -> tuple[str, dict[str, str]]:
        headers = self._conn.headers()
        headers["User-Agent"] = self.user_agent
        headers["Accept"] = accept or "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        url = self.host + path
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
        query: Query | None = None,
        body: Any = None,
        content_type: str | None = None,
        accept: str | None = None,
        timeout: float | None = None,
        fence: Callable[[], bool] | None = None,
    ) -> Any:
        """Send one request and decode the JSON answer; non-2xx raises a typed ApiError."""
        return self.request_status(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            accept=accept,
            timeout=timeout,
            fence=fence,
        )[1]

    def request_status(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str | None = None,
        accept: str | None = None,
        timeout: float | None = None,
        fence: Callable[[], bool] | None = None,
    ) -> tuple[int, Any]:
        """`request`, plus the HTTP status: 201 tells an apply that created the object from one that updated it.

        `fence`: a write is sent only while it answers true, asked before anything is done and again in the
        connection right before each block of bytes goes to the socket (wire.py); reads ignore it.

        ApiUnavailableError: not sent (server known down, deadline passed, connection refused; FencedError:
        the fence was closed). ApiTimeoutError: sent, but no complete answer in time, so a write may or may
        not have happened.
        """
        write = is_write(method, query, body)
        gate = wire.Fence(fence, f"{method} {path}") if fence is not None and write else None
        if gate is not None:
            gate.check("checked before the request was made")
        self.breaker.check()
        if self.rate_limit is not None:
            self.rate_limit.take(self.deadline)
        url, headers = self._prepare(method, path, query, content_type, accept)
        data = None if body is None else (body if isinstance(body, bytes) else jsoncodec.dumps(body))
        outgoing = _Outgoing(method, path, query, body, url, headers, data, gate)
        hook = self.before_write if write else None
        if hook is not None:
            hook(method, path)  # as late as it can be: the request leaves right after it
        return self._send_until_answered(outgoing, hook, timeout)

    def _send_until_answered(
        self, req: _Outgoing, hook: Callable[[str, str], None] | None, timeout: float | None
    ) -> tuple[int, Any]:
        """Send, and again after each 429 that may be retried (`throttle_wait`), all within one timeout."""
        budget = self._budget(timeout)  # after the hook, which may have waited
        first = time.monotonic()
        until = first + budget  # a throttled request's retries end here: its timeout bounds them all
        retries = 0
        while True:
            if retries and hook is not None:
                hook(req.method, req.path)  # a retry after a throttled wait: the Lease may be gone since
            resp = self._send(req, budget, first_attempt=not retries)  # a request retried after a 429 counts once
            if resp.status < 400:
                return int(resp.status), (jsoncodec.loads(resp.data) if resp.data else None)
            wait = throttle_wait(resp.status, resp.headers.get("Retry-After"), retries, self.max_retries)
            end = until if self.deadline is None else min(until, self.deadline)
            # sent again only with a second left for its answer: a throttled request must not turn into a
            # timeout (which says a write may have happened) for want of time
            if wait is None or time.monotonic() + wait + min(1.0, budget) > end:
                note = f" (retried {retries}x over {time.monotonic() - first:.1f}s)" if retries else ""
                raise _api_error(resp.status, resp.data, req.method, req.path, note)
            retries += 1
            with self._stats_lock:
                self.stats.throttled += 1
            log.debug("throttled (429): retrying", method=req.method, path=req.path, retry=retries, wait=round(wait, 2))
            self._sleep(wait)
            self.breaker.check()  # an outage that began meanwhile: not sent, as for any request
            budget = self._budget(timeout, until)

    def _send(self, req: _Outgoing, budget: float, *, first_attempt: bool) -> urllib3.BaseHTTPResponse:
        """One attempt, the fence asked again at the socket (a throttled retry's included); counted once."""
        import urllib3

        started = time.monotonic()
        try:
            with wire.fenced(req.gate):
                resp = self._conn.pool.request(
                    req.method,
                    req.url,
                    body=req.data,
                    headers=req.headers,
                    timeout=urllib3.Timeout(total=budget),
                    preload_content=True,
                    retries=False,
                )
        except FencedError:
            raise  # refused before the request was complete: nothing more to count, the server is fine
        except urllib3.exceptions.HTTPError as exc:
            if first_attempt:
                self._count(req.method, req.query, req.body)
            raise self._transport_error(exc, req.method, budget) from exc
        if first_attempt:
            self._count(req.method, req.query, req.body)
        with self._stats_lock:
            self.stats.bytes_read += len(resp.data or b"")
        # --log-level debug: one line per request (the query names dry runs and the field manager).
        log.debug(
            "request",
            method=req.method,
            path=req.path,
            query=req.query,
            status=resp.status,
            seconds=round(time.monotonic() - started, 4),
        )
        return resp

    def _count(self, method: str, query: Query | None, body: Any) -> None:
        with self._stats_lock:
            self.stats.count(method, query, body)

    def _transport_error(self, exc: urllib3.exceptions.HTTPError, method: str, budget: float) -> ClusterError:
        """Classify a failed request (sent or not) and let the breaker probe the server."""
        import urllib3

        error: ClusterError
        if self.deadline is not None and time.monotonic() >= self.deadline:  # cut by us, not the server's fault
            return ApiTimeoutError(f"no answer to {method} before the deadline of {self._deadline_s:g}s")
        if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):  # NewConnectionError too: nothing sent
            error = ApiUnavailableError(f"API server {self.server} unreachable: {_reason(exc)}")
        elif isinstance(exc, urllib3.exceptions.ReadTimeoutError):
            error = ApiTimeoutError(f"API server {self.server} unreachable: no answer to {method} within {budget:.3g}s")
        else:
            error = ApiTimeoutError(f"API server {self.server} unreachable: {_reason(exc)}")
        self.breaker.failed(str(error))
        return error

    def stream_lines(self, path: str, *, query: Query | None = None, timeout: float | None = None) -> Iterator[bytes]:
        """A streaming GET (watch): yields one JSON line per event until the server closes."""
        import urllib3

        url, headers = self._prepare("GET", path, query, None, None)
        with self._stats_lock:
            self.stats.reads += 1
        try:
            resp = self._conn.pool.request(
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

    def get(self, path: str, query: Query | None = None) -> Any:
        return self.request("GET", path, query=query)

    def list_collection(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        limit: int = 500,
        pages: int = 0,
        accept: str | None = None,
        timeout: float | None = None,
        api_version: str = "",
        kind: str = "",
    ) -> Listing:
        """LIST a collection page by page (`limit`, then `continue`) until the server says it is complete.

        `pages` > 0 stops after that many pages (`more` says whether some were left). The resourceVersion is
        the last page's, the one to watch from. A list item carries no apiVersion/kind of its own: given
        here, each item gets them. `accept` can ask for metadata only (PartialObjectMetadataList). A
        continue token that expired meanwhile raises GoneError, as any error of a page does.
        """
        items: list[Any] = []
        cont = ""
        read = 0
        while True:
            query: Query = {"labelSelector": label_selector, "limit": limit, "continue": cont or None}
            doc = self.request("GET", path, query=query, accept=accept, timeout=timeout) or {}
            page = doc.get("items") or []
            for item in page:
                if api_version:
                    item.setdefault("apiVersion", api_version)
                if kind:
                    item.setdefault("kind", kind)
            items.extend(page)
            meta = doc.get("metadata") or {}
            cont = str(meta.get("continue") or "")
            read += 1
            if not cont or (pages and read >= pages):
                return Listing(items, resource_version(doc), more=bool(cont))

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


def _api_error(status: int, data: bytes, method: str, path: str, note: str = "") -> ApiError:
    """The typed error of a non-2xx answer: its class by status, the Status body kept as the cause."""
    body: dict[str, Any] = {}
    try:
        decoded = jsoncodec.loads(data) if data else {}
        if isinstance(decoded, dict):
            body = decoded
    except ValueError:
        pass
    reason = str(body.get("reason") or "") or _DEFAULT_REASONS.get(status, "Error")
    message = str(body.get("message") or "")
    if not message:  # no Status (a bare "404 page not found" from the mux): name the request, or nothing does
        text = data[:300].decode(errors="replace").strip()
        message = f"{method} {path}: {text}" if text else f"{method} {path}"
    message += note
    return error_for_status(status, reason, message, body, method=method, path=path)


# when the answer has no Status body (API Priority and Fairness answers 429 in plain text)
_DEFAULT_REASONS = {404: "NotFound", 409: "Conflict", 429: "TooManyRequests"}
