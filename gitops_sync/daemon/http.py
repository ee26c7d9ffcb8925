"""The daemon's HTTP endpoints: probes, metrics, status and the Git webhook.

Standard library server, one thread per request: the endpoints are cheap reads of in-memory state,
and a dependency-free server keeps the container image small.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import structlog

from gitops_sync.daemon.metrics import CONTENT_TYPE
from gitops_sync.daemon.triggers import WebhookResult

log = structlog.get_logger(__name__)

MAX_WEBHOOK_BODY = 5 * 1024 * 1024


@dataclass
class Endpoints:
    """What the server asks the daemon; each callable must be fast and thread-safe."""

    healthy: Callable[[], tuple[bool, str]]
    ready: Callable[[], tuple[bool, str]]
    metrics: Callable[[], bytes]
    status: Callable[..., dict[str, Any]]  # status(full_history=False)
    webhook: Callable[[dict[str, str], bytes], WebhookResult]


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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], endpoints: Endpoints) -> None:
        if ":" in addr[0]:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(addr, _Handler)
        self.endpoints = endpoints


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # probes every few seconds would drown the logs; errors are logged where they happen

    def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, doc: Any) -> None:
        self._send(code, encode_json(doc), "application/json")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        ep = self.server.endpoints
        path = self.path.split("?", 1)[0]
        try:
            if path in ("/healthz", "/livez"):
                ok, why = ep.healthy()
                self._send(200 if ok else 503, f"{why}\n".encode())
            elif path == "/readyz":
                ok, why = ep.ready()
                self._send(200 if ok else 503, f"{why}\n".encode())
            elif path == "/metrics":
                self._send(200, ep.metrics(), CONTENT_TYPE)
            elif path == "/status":
                query = parse_qs(urlsplit(self.path).query)
                self._json(200, ep.status(full_history=True) if query.get("history") == ["all"] else ep.status())
            elif path == "/hooks/git":
                self._send(405, b"POST only\n")
            else:
                self._send(404, b"not found: /healthz /readyz /metrics /status, POST /hooks/git\n")
        except Exception as exc:
            log.exception("http handler failed", path=path)
            self._send(500, f"internal error: {exc}\n".encode())

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != "/hooks/git":
            self._send(404, b"not found\n")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self._send(400, b"bad Content-Length\n")
            return
        if length > MAX_WEBHOOK_BODY:
            self._send(413, b"payload too large\n")
            self.close_connection = True
            return
        body = self.rfile.read(length) if length else b""
        try:
            result = self.server.endpoints.webhook(dict(self.headers.items()), body)
        except Exception as exc:
            log.exception("webhook handler failed")
            self._send(500, f"internal error: {exc}\n".encode())
            return
        self._json(result.status, {"accepted": result.ok, "reason": result.reason, "provider": result.provider})


class HttpServer:
    def __init__(self, addr: str, endpoints: Endpoints) -> None:
        self._server = _Server(parse_addr(addr), endpoints)
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
