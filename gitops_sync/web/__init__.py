"""The read-only web page (served by the daemon at `/`) and `diff -o html`, from one set of Jinja2 templates.

`page()` answers a GET for a path of the page from the status document the daemon hands it; the HTTP
server (daemon/http.py) sends the result with `HEADERS` (a strict Content-Security-Policy: the script
and stylesheet come from /static/ of the same server, nothing inline, nothing from elsewhere).
`diff_html()` renders a change set to one self-contained file (stylesheet inlined, no script) for a CI
artifact. Every value is autoescaped by Jinja2: a ConfigMap value `<script>` is shown as text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote

import jinja2

from gitops_sync.web import object_page, view

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = [
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
]
HTML = "text/html; charset=utf-8"
TOKEN_COOKIE = "gitops-sync-token"
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")
_STATIC = {
    "app.css": "text/css; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


@dataclass(frozen=True)
class Page:
    status: int
    body: bytes
    content_type: str = HTML


@cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gitops_sync.web", "templates"),
        autoescape=True,  # every template, whatever its name: values come from Git and the cluster
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["STATES"] = view.STATES
    return env


def static(name: str) -> bytes | None:
    """The page's own file `name`, None for any other name (never cached: the name comes from the URL)."""
    return _static_file(name) if name in _STATIC else None


@lru_cache(maxsize=len(_STATIC))
def _static_file(name: str) -> bytes:
    # Called only with the names of _STATIC. It used to be one unbounded cache of every name asked for:
    # served without authentication, 3,000 distinct 60 kB names kept ~180 MB in the daemon for good.
    return (resources.files("gitops_sync.web") / "static" / name).read_bytes()


def _render(template: str, **context: Any) -> bytes:
    return _env().get_template(template).render(**context).encode()


def _not_found(what: str) -> Page:
    return Page(404, _render("missing.html", what=what, title="not found", live=False))


def token_from_cookie(header: str) -> str:
    """The token a browser got at /login, from its Cookie header ("" when none or not token-shaped)."""
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == TOKEN_COOKIE and value and len(value) <= 16 * 1024 and set(value) <= _TOKEN_CHARS:
            return value
    return ""


def login_page(reason: str = "", status: int = 200, *, tenants: bool = False) -> bytes:
    """The sign-in form (also the body of a 401/403 on a page path, so a browser sees what to do); `tenants`:
    a fleet's page, which shows each token the GitSyncs it may get."""
    return _render("login.html", reason=reason, status=status, title="sign in", live=False, tenants=tenants)


def is_page(path: str) -> bool:
    """The paths the page answers (everything else is the daemon's API or a 404)."""
    return path == "/" or path.startswith(("/sources/", "/static/"))


StatusFn = Callable[..., dict[str, Any]]
HistoryFn = Callable[[str, str, str, str], dict[str, list[dict[str, Any]]]]


def page(
    path: str,
    query_string: str,
    status: StatusFn,
    history: HistoryFn | None = None,
    visible: view.Visible | None = None,
    reader: str = "",
) -> Page:
    """A GET of `path`; `status()` is the daemon's /status document, `history(group, kind, ns, name)` the
    ownership history of every field Git sets on one object (None: only what /status carries).

    `visible(namespace, name)`: whether this reader may see that GitSync (a fleet's per-tenant page; None:
    every source). A source it may not see is answered as one that does not exist. `reader` names the user."""
    if path.startswith("/static/"):
        name = path.removeprefix("/static/")
        body = static(name)
        return Page(200, body, _STATIC[name]) if body is not None else Page(404, b"not found\n", "text/plain")
    query = parse_qs(query_string, keep_blank_values=True)
    doc = status()
    tenant = {"limited": visible is not None, "reader": reader}
    if path == "/":
        srcs = view.sources(doc, visible)
        return Page(200, _render("sources.html", sources=srcs, title="sources", live=True, **tenant))
    parts = [unquote(p) for p in path.removeprefix("/sources/").split("/")]
    # A GitSync is `namespace/name` (two segments), a single source its inventory's name (one).
    src = view.find_source(doc, "/".join(parts[:2]), visible) if len(parts) >= 2 else None
    if src is not None:
        parts = ["/".join(parts[:2]), *parts[2:]]
    else:
        src = view.find_source(doc, parts[0], visible)
    if src is None:
        return _not_found(f"source {parts[0]!r}")
    if len(parts) == 1 or (len(parts) == 2 and not parts[1]):
        flt = view.Filter.parse(query)
        return Page(
            200,
            _render(
                "objects.html",
                source=src,
                listing=view.listing(src.doc, src.id, flt),
                filter=flt,
                title=src.id,
                live=True,
            ),
        )
    if len(parts) == 6 and parts[1] == "objects":
        group, kind, ns, name = parts[2:]
        group = "" if group == view.CORE else group
        ns = "" if ns == "-" else ns
        # The daemon's history of the object is kept once for every source that wants it; one this source
        # failed to plan (a tenant refused to read it) gets only this source's own, never another's values.
        planned = object_page.find_object(src.doc, group, kind, ns, name)
        failed = planned is not None and planned.get("action") == "error"
        fields = history(group, kind, ns, name) if history is not None and not failed else None
        obj = object_page.object_view(src.doc, src.id, group, kind, ns, name, fields)
        if obj is None:
            return _not_found(f"object {kind} {ns + '/' if ns else ''}{name} in source {src.id!r}")
        return Page(200, _render("object.html", source=src, obj=obj, title=obj.row.title, live=True))
    return _not_found(f"page {path!r}")


def diff_html(cs: Mapping[str, Any]) -> str:
    """`diff -o html`: the change set (`diff -o json`'s document) as one self-contained HTML file."""
    src = view.source_of(cs)
    objs = []
    for r in view.rows(cs, src.id):
        o = object_page.object_view(cs, src.id, r.group, r.kind, r.namespace, r.name)
        if o is not None:
            objs.append(o)
    css = (static("app.css") or b"").decode()
    return _env().get_template("diff.html").render(source=src, objects=objs, css=css, title=f"diff {src.id}")


__all__ = [
    "CSP",
    "HEADERS",
    "TOKEN_COOKIE",
    "Page",
    "diff_html",
    "is_page",
    "login_page",
    "page",
    "token_from_cookie",
]
