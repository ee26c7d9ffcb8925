"""The daemon's HTTP server: one port for probes, metrics, /status, the web page and the Git webhook.

Served by waitress: one event loop thread reads and writes every connection and hands only complete
requests to a fixed pool of worker threads, so a slow client, a trickled header or hundreds of idle
connections cost a socket each, never a thread. `Limits` bounds connections, header and body size,
idle time and the time a request may take to arrive; at the connection cap the connection longest
without a complete request makes room for a new one, so slow clients cannot keep the probes out.
What each path answers is `routes.Routes`, asking the daemon through `routes.Endpoints`.
"""

from __future__ import annotations

import heapq
import logging
import resource
import socket
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from gitops_sync.daemon.runtime.auth import Authorizer
from gitops_sync.daemon.serving.routes import MAX_WEBHOOK_BODY, Endpoints, Routes
from gitops_sync.errors import GitOpsError
from gitops_sync.log import get_logger

log = get_logger(__name__)

__all__ = ["Endpoints", "HttpServer", "Limits", "ListenError", "listen", "parse_addr"]


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


class ListenError(GitOpsError):
    """The address cannot be bound (in use, not local, not resolvable)."""


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
            Routes(endpoints, auth, limits.max_body_bytes, max(1, limits.threads - limits.reserved)),
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
