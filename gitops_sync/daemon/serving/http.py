"""The daemon's HTTP endpoints: probes, metrics, status, the web page (web/) and the Git webhook.

Served by waitress: one event loop thread reads and writes every connection and hands only complete
requests to a fixed pool of worker threads, so a slow client, a trickled header or hundreds of idle
connections cost a socket each, never a thread. `Limits` bounds connections, header and body size,
idle time and the time a request may take to arrive; at the connection cap the connection longest
without a complete request makes room for a new one, so slow clients cannot keep the probes out. Each
request asks the daemon through `Endpoints` (cheap reads of in-memory state); /status, /metrics, the
page and any other path first pass the optional `Authorizer` (auth.py: TokenReview +
SubjectAccessReview). Probes stay open for the kubelet, and the webhook is authenticated by its HMAC
(triggers.py).
"""

from __future__ import annotations

import heapq
import io
import json
import logging
import resource
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from gitops_sync.daemon.reconcile.triggers import WebhookResult
from gitops_sync.daemon.runtime.auth import Authorizer, Decision, Resource
from gitops_sync.daemon.runtime.metrics import CONTENT_TYPE
from gitops_sync.errors import GitOpsError
from gitops_sync.log import get_logger
from gitops_sync.web import HEADERS as PAGE_HEADERS
from gitops_sync.web import TOKEN_COOKIE, is_page, login_page, page, token_from_cookie

log = get_logger(__name__)

MAX_WEBHOOK_BODY = 5 * 1024 * 1024

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


@dataclass(frozen=True)
class Limits:
    """What one daemon's HTTP server holds at most, and for how long."""

    threads: int = 8  # workers; requests beyond wait in a queue, connections in the event loop
    reserved: int = 2  # workers only probes and the webhook may use (the rest: /status, /metrics, others)
    connections: int = 500  # open at once; more wait in the kernel's listen backlog
    idle_timeout: int = 30  # seconds a connection may stay silent (keep-alive or before its first byte)
    request_timeout: int = 10  # seconds from a request's first byte until its headers and body are in
    max_header_bytes: int = 64 * 1024
    max_body_bytes: int = MAX_WEBHOOK_BODY


@dataclass
class Endpoints:
    """What the server asks the daemon; each callable must be fast and thread-safe."""

    healthy: Callable[[], tuple[bool, str]]
    ready: Callable[[], tuple[bool, str]]
    metrics: Callable[[], bytes]
    status: Callable[..., dict[str, Any]]  # status(full_history=False)
    webhook: Callable[[dict[str, str], bytes], WebhookResult]
    # history(group, kind, namespace, name): path -> records of every field Git sets on one object (web page)
    history: Callable[[str, str, str, str], dict[str, list[dict[str, Any]]]] | None = None
    # (group, plural) a page reader must be allowed to `get` (in the source's namespace, by its name) to see a
    # source: a fleet's GitSyncs, so each tenant sees its own. None: every source, to whoever may get `/`.
    tenant_resource: tuple[str, str] | None = None


class ListenError(GitOpsError):
    """The address cannot be bound (in use, not local, not resolvable)."""


def encode_json(doc: Any) -> bytes:
    """`json.dumps(doc, indent=2, default=str)` + newline, as bytes, encoded a slice at a time.

    With `indent` the encoder is the pure-Python one, and json.dumps keeps a list of every small chunk it
    yields, then the whole str, then the bytes: for /status of 10,000 objects (40 MB) that took the daemon's
    RSS from ~280 MB to ~560 MB. Here only the bytes grow; the output is byte for byte the same.
    """
    out = io.BytesIO()
    batch: list[str] = []
    for chunk in json.JSONEncoder(indent=2, default=str).iterencode(doc):
        batch.append(chunk)
        if len(batch) >= 8192:
            out.write("".join(batch).encode())
            batch.clear()
    batch.append("\n")
    out.write("".join(batch).encode())
    return out.getvalue()


def parse_addr(addr: str) -> tuple[str, int]:
    """`:8080`, `0.0.0.0:8080`, `[::]:8080`, `localhost:0` -> (host, port)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--http-addr {addr!r}: expected HOST:PORT (e.g. :8080 or 127.0.0.1:8080)")
    return host.strip("[]"), int(port)


def listen(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A listening TCP socket; a failure names the address: `cannot listen on 127.0.0.1:8080: address ...`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    shown = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host or '0.0.0.0'}:{port}"
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart while old sockets sit in TIME_WAIT
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()
        raise ListenError(f"cannot listen on {shown}: {reason}") from exc
    return sock


# -- the WSGI application ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


_REASONS = {
    200: "OK",
    202: "Accepted",
    303: "See Other",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _text(status: int, text: str, headers: list[tuple[str, str]] | None = None) -> _Reply:
    return _Reply(status, f"{text}\n".encode(), headers=headers or [])


_GET_ONLY = _text(405, "GET or HEAD only", [("Allow", "GET, HEAD")])


def _json(status: int, doc: Any) -> _Reply:
    return _Reply(status, encode_json(doc), "application/json")


class _App:
    """Routes a request; every failure inside becomes a status code, never an exception for the server."""

    def __init__(self, endpoints: Endpoints, auth: Authorizer | None, max_body: int, heavy: int) -> None:
        self.endpoints = endpoints
        self.auth = auth
        self.max_body = max_body
        # /status, /metrics and their token reviews may take seconds: they get `heavy` workers at most,
        # so the rest are always free for the kubelet's probes (which time out after 1 s).
        self._heavy = threading.BoundedSemaphore(heavy)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET"))
        path = str(environ.get("PATH_INFO") or "/")
        try:
            reply = self._route(method, path, environ)
        except Exception as exc:
            # the exception text may quote a value: its type only, the traceback at debug level
            log.error("http handler failed", path=path, error_type=type(exc).__name__)
            log.debug("http handler traceback", exc_info=True)
            reply = _text(500, f"internal error ({type(exc).__name__}; the daemon's log has more)")
        headers = [
            ("Content-Type", reply.content_type),
            ("Content-Length", str(len(reply.body))),
            ("Cache-Control", "no-store"),
            *reply.headers,
        ]
        start_response(f"{reply.status} {_REASONS.get(reply.status, '')}".rstrip(), headers)
        return [b"" if method == "HEAD" else reply.body]

    def _route(self, method: str, path: str, environ: dict[str, Any]) -> _Reply:
        ep = self.endpoints
        if path == "/hooks/git":
            return self._webhook(environ) if method == "POST" else _text(405, "POST only", [("Allow", "POST")])
        reading = method in ("GET", "HEAD")
        if path in ("/healthz", "/livez", "/readyz"):
            if not reading:
                return _GET_ONLY
            ok, why = ep.ready() if path == "/readyz" else ep.healthy()
            return _text(200 if ok else 503, why)
        if not self._heavy.acquire(blocking=False):
            return _text(503, "busy: too many /status and /metrics requests at once", [("Retry-After", "1")])
        try:
            return self._read(method, path, environ)
        finally:
            self._heavy.release()

    def _read(self, method: str, path: str, environ: dict[str, Any]) -> _Reply:
        ep = self.endpoints
        reading = method in ("GET", "HEAD")
        if path == "/login":
            return self._login(method, environ)
        decision: Decision | None = None
        if self.auth is not None and not path.startswith("/static/"):  # the page's own CSS and JS: no data
            header = environ.get("HTTP_AUTHORIZATION")
            if header is None and is_page(path):  # a browser sends the token it was given at /login
                token = token_from_cookie(str(environ.get("HTTP_COOKIE") or ""))
                header = f"Bearer {token}" if token else None
            # every path of the page is one URL for RBAC: `/` (what it shows is what /status has); a per-tenant
            # page asks only who the token is, then per source whether it may get its GitSync
            decision = self.auth(self._page_question(path), header)
            if decision.status != 200:
                if is_page(path) and decision.status in (401, 403) and reading:
                    body = login_page(decision.reason, decision.status, tenants=self._tenants)
                    headers = [*_refused(decision).headers, *PAGE_HEADERS]
                    return _Reply(decision.status, body, "text/html; charset=utf-8", headers)
                return _refused(decision)
        if is_page(path):
            if not reading:
                return _GET_ONLY
            visible = _visible(decision, ep.tenant_resource) if decision and ep.tenant_resource else None
            try:
                answer = page(
                    path,
                    str(environ.get("QUERY_STRING") or ""),
                    ep.status,
                    ep.history,
                    visible=visible,
                    reader=decision.user if decision else "",
                )
            except GitOpsError as exc:  # a SubjectAccessReview the API server did not answer: fail closed
                log.warning("web page: cannot check what the reader may see", error=str(exc))
                return _text(503, f"cannot check access now: {exc}", [("Retry-After", "5")])
            return _Reply(answer.status, answer.body, answer.content_type, list(PAGE_HEADERS))
        if path not in ("/metrics", "/status"):
            return _text(404, "not found: / (web page) /healthz /readyz /metrics /status, POST /hooks/git")
        if not reading:
            return _GET_ONLY
        if path == "/metrics":
            return _Reply(200, ep.metrics(), CONTENT_TYPE)
        query = parse_qs(str(environ.get("QUERY_STRING") or ""))
        return _json(200, ep.status(full_history=True) if query.get("history") == ["all"] else ep.status())

    @property
    def _tenants(self) -> bool:
        return self.endpoints.tenant_resource is not None

    def _page_question(self, path: str) -> str:
        """What the authorizer is asked for `path`: the path itself, `/` for the page, "" (only who the token
        is) for a per-tenant page, which then asks per source."""
        if not is_page(path):
            return path
        return "" if self._tenants else "/"

    def _login(self, method: str, environ: dict[str, Any]) -> _Reply:
        """The page's sign-in: a form for a token (GET); POST checks it as a request to `/` would be and
        keeps it in an HttpOnly, SameSite=Strict cookie, so a browser can send it (it cannot add a header)."""
        if self.auth is None:
            return _Reply(303, b"", headers=[("Location", "/")])
        if method in ("GET", "HEAD"):
            return _Reply(200, login_page(tenants=self._tenants), "text/html; charset=utf-8", list(PAGE_HEADERS))
        if method != "POST":
            return _text(405, "GET or POST only", [("Allow", "GET, POST")])
        length = str(environ.get("CONTENT_LENGTH") or "")
        if not length.isdigit() or int(length) > 64 * 1024:
            return _text(400, "a form with a token is expected")
        form = parse_qs(environ["wsgi.input"].read(int(length)).decode(errors="replace"))
        token = (form.get("token") or [""])[0].strip()
        decision = self.auth(self._page_question("/"), f"Bearer {token}")
        if decision.status != 200 or not token_from_cookie(f"{TOKEN_COOKIE}={token}"):
            status = decision.status if decision.status != 200 else 400
            reason = decision.reason if decision.status != 200 else "not a token"
            body = login_page(reason, status, tenants=self._tenants)
            return _Reply(status, body, "text/html; charset=utf-8", list(PAGE_HEADERS))
        secure = "; Secure" if environ.get("wsgi.url_scheme") == "https" else ""
        cookie = f"{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}"
        return _Reply(303, b"", headers=[("Location", "/"), ("Set-Cookie", cookie)])

    def _webhook(self, environ: dict[str, Any]) -> _Reply:
        length = str(environ.get("CONTENT_LENGTH") or "")
        if not length:  # (a body sent without a length is then read as the next request: 400)
            return _text(411, "Content-Length required")
        if not length.isdigit():  # waitress refuses these first (400); kept for any other server
            return _text(400, "bad Content-Length")
        if int(length) > self.max_body:  # likewise (413)
            return _text(413, "payload too large")
        body = environ["wsgi.input"].read(int(length))
        headers = {k[5:].replace("_", "-").title(): str(v) for k, v in environ.items() if k.startswith("HTTP_")}
        result = self.endpoints.webhook(headers, body)
        return _json(result.status, {"accepted": result.ok, "reason": result.reason, "provider": result.provider})


def _visible(decision: Decision, resource: tuple[str, str]) -> Callable[[str, str], bool]:
    """Whether the reader of `decision` may `get` the object (namespace, name) of `resource`: a grant on the
    whole namespace answers every object there (one review per namespace); only a refusal asks about the name
    (a Role with resourceNames). Nobody to ask (an authorizer without `may`): nothing is visible."""
    may = decision.may
    group, plural = resource
    if may is None:
        return lambda namespace, name: False

    def visible(namespace: str, name: str) -> bool:
        whole: Resource = ("get", group, plural, namespace, "")
        return may(whole) or may(("get", group, plural, namespace, name))

    return visible


def _refused(decision: Decision) -> _Reply:
    headers = [("WWW-Authenticate", 'Bearer realm="gitops-sync"')] if decision.status == 401 else []
    if decision.status == 503:
        headers.append(("Retry-After", "5"))
    return _text(decision.status, decision.reason, headers)


# -- the server ---------------------------------------------------------------------------------------


class _Parser(HTTPRequestParser):  # type: ignore[misc]  # waitress is untyped
    """Remembers when a request's first byte arrived, for the request deadline."""

    def __init__(self, adj: Adjustments) -> None:
        super().__init__(adj)
        self.started = time.monotonic()


FRESH = 0.25  # seconds a new or just-answered connection is safe from being closed for room at the cap


class _Channel(HTTPChannel):  # type: ignore[misc]
    """Remembers when it last stood at a request boundary (connected, or a request complete): the
    connection that has gone longest without one is the first to make room at the connection cap."""

    parser_class = _Parser

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.progress = time.monotonic()
        super().__init__(*args, **kwargs)

    def received(self, data: bytes) -> bool:
        more = bool(super().received(data))
        if self.request is None:  # what arrived ended with a complete request
            self.progress = time.monotonic()
        return more


def _unread(sock: socket.socket) -> bool:
    """Whether bytes wait in the socket (a peer that closed has none: it may go first)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:  # BlockingIOError: nothing waiting; anything else: the connection is broken anyway
        return False


class _Server(TcpWSGIServer):  # type: ignore[misc]
    """waitress's server, closing idle connections itself, cutting requests that trickle in, and making room
    at the connection cap instead of leaving new connections in the listen backlog.

    waitress only flags an idle connection to be closed on its next write event, and a client that
    stopped reading never gives one: its connection (and a response buffered in a temporary file) stayed
    open for good. And it has no deadline for a request to arrive in full, so a byte every few seconds
    kept a connection forever. `sweep` runs in the event-loop thread between two polls: closing a socket
    while a poll is being set up could hand its stale event to a new connection that reused the fd.

    At the cap waitress stops accepting, so 600 connections trickling a header byte a second (slowloris)
    held all 500 slots and the kubelet's probe waited in the backlog behind the rest for seconds (its
    timeout is 1 s). Here a new connection is still accepted, and the connection that has gone longest
    without a complete request and has none in a worker is closed for it (`_make_room`, after the accept
    in the same event, so the new socket cannot have reused the closed one's fd). A probe sends its
    request at once, so it is never the one closed; a slow client is closed only while the server is full,
    a silent or idle one only after `FRESH` seconds. (A flood of new connections faster than the cap per
    `FRESH` still fills it: that is a connection flood, not a slow client, and the backlog takes the rest.)
    """

    channel_class = _Channel
    request_timeout = 10.0
    evicted = 0  # connections closed to make room at the cap (a figure for logs and tests)
    next_channel_cleanup = 0.0  # waitress's, typed
    _full_since: float | None = None  # when the cap was reached (None: below it)
    _evicted_before = 0

    def _limit(self) -> int:
        return int(self.adj.connection_limit)

    def readable(self) -> bool:
        now = time.time()
        if now >= self.next_channel_cleanup:  # waitress's maintenance, as its own readable() runs it
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        if not self.accepting:
            return False
        open_now = len(self._map)
        if self._full_since is not None and open_now < self._limit() * 0.9:  # (not once per close)
            log.info(
                "http server: below the connection cap again",
                seconds=round(time.monotonic() - self._full_since, 1),
                closed_for_room=self.evicted - self._evicted_before,
            )
            self._full_since = None
        if open_now < self._limit():
            return True
        if self._full_since is None:
            self._full_since, self._evicted_before = time.monotonic(), self.evicted
            log.warning(
                "http server: connection cap reached; closing the connection longest without a complete "
                "request for each new one",
                cap=self._limit(),
            )
        return self._stalest() is not None  # every slot busy in a worker: new ones wait in the backlog

    def handle_accept(self) -> None:
        before = set(self._map)
        super().handle_accept()
        if len(self._map) > self._limit():
            self._make_room(exclude=set(self._map) - before)

    def _stalest(self, exclude: Collection[int] = ()) -> HTTPChannel | None:
        """The connection to close first: none of its requests in a worker, nothing unread in its socket,
        and the longest without a complete request. One that sent nothing yet gets `FRESH` seconds: its
        client may be about to send (a burst of clients that each send at once must all be answered)."""
        now = time.monotonic()
        candidates = [
            channel
            for fd, channel in self.active_channels.items()
            if fd not in exclude
            and not channel.requests
            and (channel.request is not None or now - getattr(channel, "progress", now) >= FRESH)
        ]
        for channel in heapq.nsmallest(8, candidates, key=lambda c: getattr(c, "progress", now)):
            if not _unread(channel.socket):  # bytes waiting: it is sending, the next poll reads them
                return channel
        return None

    def _make_room(self, exclude: set[int]) -> None:
        victim = self._stalest(exclude)
        if victim is not None:
            self.evicted += 1
            victim.handle_close()

    def sweep(self) -> None:
        idle_cutoff = time.time() - self.adj.channel_timeout
        request_cutoff = time.monotonic() - self.request_timeout
        for channel in list(self.active_channels.values()):
            if channel.requests:
                continue  # a worker is answering it: never pull the socket from under it
            request = channel.request
            if channel.last_activity < idle_cutoff or (request is not None and request.started < request_cutoff):
                channel.handle_close()


class _ToStructlog(logging.Handler):
    """waitress logs through `logging`; the daemon's log is structlog's."""

    def emit(self, record: logging.LogRecord) -> None:
        level = "warning" if record.levelno >= logging.WARNING else "info"
        getattr(log, level)("http server: " + record.getMessage(), logger_name=record.name)


def _route_waitress_logs() -> None:
    logger = logging.getLogger("waitress")
    if not any(isinstance(h, _ToStructlog) for h in logger.handlers):
        logger.addHandler(_ToStructlog(logging.INFO))
        logger.propagate = False
        logger.setLevel(logging.INFO)


class HttpServer:
    """Binds at construction (so a busy port fails before anything starts); serves after `start()`."""

    def __init__(
        self, addr: str, endpoints: Endpoints, *, auth: Authorizer | None = None, limits: Limits | None = None
    ) -> None:
        self.limits = limits = limits or Limits()
        host, port = parse_addr(addr)
        sock = listen(host, port)
        _route_waitress_logs()
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)  # each connection is a descriptor: stay well below
        connections = min(limits.connections, max(16, soft // 2)) if soft > 0 else limits.connections
        adj = Adjustments(
            sockets=[sock],
            threads=limits.threads,
            connection_limit=connections,
            channel_timeout=limits.idle_timeout,
            cleanup_interval=1,
            asyncore_loop_timeout=1,
            asyncore_use_poll=True,  # select() stops at fd 1024
            max_request_header_size=limits.max_header_bytes,
            max_request_body_size=limits.max_body_bytes,
            expose_tracebacks=False,
            ident="gitops-sync",
        )
        self._map: dict[int, Any] = {}
        self._dispatcher = ThreadedTaskDispatcher()
        self._server = _Server(
            _App(endpoints, auth, limits.max_body_bytes, max(1, limits.threads - limits.reserved)),
            self._map,
            True,
            sock,
            dispatcher=self._dispatcher,
            adj=adj,
            bind_socket=False,
            sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()),
        )
        self._server.request_timeout = float(limits.request_timeout)
        self._stopping = threading.Event()
        self._closing = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.effective_port)

    def start(self) -> HttpServer:
        self._dispatcher.set_thread_count(self.limits.threads)
        self._thread.start()
        return self

    def _serve(self) -> None:
        try:
            next_sweep = 0.0
            while not self._stopping.is_set():
                wasyncore.loop(timeout=0.5, map=self._map, use_poll=True, count=1)
                if time.monotonic() >= next_sweep:
                    self._server.sweep()
                    next_sweep = time.monotonic() + 0.5
        except Exception:  # the sockets close with it: the kubelet's probes fail and the pod is restarted
            log.exception("http server loop failed; probes stop answering")
        finally:
            self._close()

    def _close(self) -> None:
        with self._closing:
            if self._closed:
                return
            self._closed = True
            wasyncore.close_all(self._map)
        self._dispatcher.shutdown(timeout=5)

    def stop(self) -> None:
        """Close every connection and the listening socket; wait for the workers (at most ~5 s)."""
        self._stopping.set()
        with self._closing:  # the loop may be closing right now: never write to a closed (or reused) fd
            if not self._closed and self._thread.is_alive():
                self._server.pull_trigger()
        if self._thread.ident is not None:
            self._thread.join(10)
        self._close()  # never started, or the loop died
