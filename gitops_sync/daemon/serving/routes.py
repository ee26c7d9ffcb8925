"""What each path of the daemon's HTTP server answers: probes, /metrics, /status, the web page (web/), the
sign-in and the Git webhook.

`Routes` is the WSGI application `http.HttpServer` serves. Each request asks the daemon through `Endpoints`
(cheap reads of in-memory state); /status, /metrics, the page and any other path first pass the optional
`Authorizer` (runtime/auth.py: TokenReview + SubjectAccessReview), and a per-tenant page shows each reader
only the sources whose GitSync it may get. Probes stay open for the kubelet; the webhook is authenticated by
its HMAC (reconcile/triggers.py). Every failure becomes a status code, never an exception for the server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

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


def encode_json(doc: Any) -> list[bytes]:
    """`json.dumps(doc, indent=2, default=str)` + newline, as slices of bytes encoded one at a time.

    With `indent` the encoder is the pure-Python one, and json.dumps keeps a list of every small chunk it
    yields, then the whole str, then the bytes: for /status of 10,000 objects (40 MB) that took the daemon's
    RSS from ~280 MB to ~560 MB. Here only the slices grow, and they go out as they are (one joined copy
    of them all was the last doubling: /status was the daemon's peak at 20,000 objects, bench case 6);
    joined, the output is byte for byte json.dumps's.
    """
    out: list[bytes] = []
    batch: list[str] = []
    for chunk in json.JSONEncoder(indent=2, default=str).iterencode(doc):
        batch.append(chunk)
        if len(batch) >= 8192:
            out.append("".join(batch).encode())
            batch.clear()
    batch.append("\n")
    out.append("".join(batch).encode())
    return out


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes | list[bytes]  # a list: slices sent one after another (encode_json)
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


def _text(status: int, text: str, headers: list[tuple[str, str]] | None = None) -> Reply:
    return Reply(status, f"{text}\n".encode(), headers=headers or [])


_GET_ONLY = _text(405, "GET or HEAD only", [("Allow", "GET, HEAD")])


def _json(status: int, doc: Any) -> Reply:
    return Reply(status, encode_json(doc), "application/json")


class Routes:
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
            ("Content-Length", str(len(reply.body) if isinstance(reply.body, bytes) else sum(map(len, reply.body)))),
            ("Cache-Control", "no-store"),
            *reply.headers,
        ]
        start_response(f"{reply.status} {_REASONS.get(reply.status, '')}".rstrip(), headers)
        if method == "HEAD":
            return [b""]
        return [reply.body] if isinstance(reply.body, bytes) else reply.body

    def _route(self, method: str, path: str, environ: dict[str, Any]) -> Reply:
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

    def _read(self, method: str, path: str, environ: dict[str, Any]) -> Reply:
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
                    return Reply(decision.status, body, "text/html; charset=utf-8", headers)
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
            return Reply(answer.status, answer.body, answer.content_type, list(PAGE_HEADERS))
        if path not in ("/metrics", "/status"):
            return _text(404, "not found: / (web page) /healthz /readyz /metrics /status, POST /hooks/git")
        if not reading:
            return _GET_ONLY
        if path == "/metrics":
            return Reply(200, ep.metrics(), CONTENT_TYPE)
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

    def _login(self, method: str, environ: dict[str, Any]) -> Reply:
        """The page's sign-in: a form for a token (GET); POST checks it as a request to `/` would be and
        keeps it in an HttpOnly, SameSite=Strict cookie, so a browser can send it (it cannot add a header)."""
        if self.auth is None:
            return Reply(303, b"", headers=[("Location", "/")])
        if method in ("GET", "HEAD"):
            return Reply(200, login_page(tenants=self._tenants), "text/html; charset=utf-8", list(PAGE_HEADERS))
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
            return Reply(status, body, "text/html; charset=utf-8", list(PAGE_HEADERS))
        secure = "; Secure" if environ.get("wsgi.url_scheme") == "https" else ""
        cookie = f"{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}"
        return Reply(303, b"", headers=[("Location", "/"), ("Set-Cookie", cookie)])

    def _webhook(self, environ: dict[str, Any]) -> Reply:
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


def _refused(decision: Decision) -> Reply:
    headers = [("WWW-Authenticate", 'Bearer realm="gitops-sync"')] if decision.status == 401 else []
    if decision.status == 503:
        headers.append(("Retry-After", "5"))
    return _text(decision.status, decision.reason, headers)
