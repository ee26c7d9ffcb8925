"""The web page's templates and views: escaping, masking, filtering, headers, `diff -o html`."""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

from gitops_sync.daemon.auth import Decision
from gitops_sync.daemon.http import Endpoints, _App
from gitops_sync.daemon.triggers import WebhookResult
from gitops_sync.web import CSP, diff_html, page, view

EVIL = '<script>alert("x")</script>'


def status_doc() -> dict[str, Any]:
    """A /status document: a drifted Deployment, a ConfigMap with markup in it, a Secret, a fight."""
    return {
        "revision": "0123456789abcdef",
        "source": "/repo",
        "inventory": {"name": "apps", "namespace": "team", "sourceIdentity": "/repo"},
        "dryRun": True,
        "summary": {"create": 0, "update": 1, "unchanged": 2, "prune": 0, "conflict": 0, "error": 0},
        "errors": [f"render: bad {EVIL}"],
        "objects": [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "namespace": "team",
                "name": "web",
                "action": "update",
                "state": "drifted",
                "health": "Healthy",
                "message": "1 field drifted",
                "origin": "web.yaml",
                "drift": [
                    {
                        "path": ".spec.replicas",
                        "desired": 3,
                        "live": 5,
                        "manager": "kubectl",
                        "operation": "Update",
                        "subresource": "scale",
                        "actor": "kubectl scale",
                    }
                ],
                "conflicts": [],
                "coOwners": [],
            },
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "namespace": "team",
                "name": "evil",
                "action": "update",
                "state": "drifted",
                "message": EVIL,
                "origin": "cm.yaml",
                "drift": [
                    {
                        "path": ".data.page",
                        "desired": EVIL,
                        "live": "<b>live</b>",
                        "manager": "kubectl-edit",
                        "operation": "Update",
                        "subresource": "",
                        "actor": "kubectl edit",
                    }
                ],
                "conflicts": [],
                "coOwners": [],
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "namespace": "team",
                "name": "creds",
                "action": "update",
                "state": "drifted",
                "message": "",
                "origin": "s.yaml",
                "drift": [
                    {
                        "path": ".data.password",
                        "desired": "hunter2-desired",
                        "live": "hunter2-live",
                        "manager": "kubectl-edit",
                        "operation": "Update",
                        "subresource": "",
                        "actor": "",
                    }
                ],
                "conflicts": [],
                "coOwners": [],
            },
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "namespace": "team",
                "name": "calm",
                "action": "unchanged",
                "state": "synced",
                "message": "",
                "origin": "calm.yaml",
                "drift": [],
                "conflicts": [],
                "coOwners": [],
            },
        ],
        "history": [
            {
                "group": "apps",
                "kind": "Deployment",
                "namespace": "team",
                "name": "web",
                "fields": {
                    ".spec.replicas": [
                        {
                            "value": 3,
                            "manager": "gitops-sync",
                            "operation": "Apply",
                            "subresource": "",
                            "time": "t1",
                            "observed": "2026-12-01T10:00:00.000Z",
                        },
                        {
                            "value": 5,
                            "manager": "kubectl",
                            "operation": "Update",
                            "subresource": "scale",
                            "time": "t2",
                            "observed": "2026-12-01T10:01:00.000Z",
                        },
                    ]
                },
            },
            {
                "group": "",
                "kind": "Secret",
                "namespace": "team",
                "name": "creds",
                "fields": {
                    ".data.password": [
                        {
                            "value": "hunter2-old",
                            "manager": "gitops-sync",
                            "operation": "Apply",
                            "subresource": "",
                            "time": "t1",
                            "observed": "o1",
                        },
                        {
                            "value": "hunter2-live",
                            "manager": "kubectl-edit",
                            "operation": "Update",
                            "subresource": "",
                            "time": "t2",
                            "observed": "o2",
                        },
                    ]
                },
            },
        ],
        "fights": [
            {
                "group": "apps",
                "kind": "Deployment",
                "namespace": "team",
                "name": "web",
                "field": ".spec.replicas",
                "managers": ["gitops-sync", "kubectl"],
                "changes": 4,
                "first": "f",
                "last": "l",
                "values": [],
            }
        ],
        "daemon": {
            "mode": "detect-only",
            "ready": True,
            "readyReason": "ok",
            "fieldManager": "gitops-sync",
            "appliedRevision": "0123456789abcdef",
            "source": {"repo": "/repo", "revision": "0123456789abcdef", "lastChecked": "now", "error": ""},
        },
    }


def get(path: str, query: str = "", doc: dict[str, Any] | None = None) -> tuple[int, str]:
    answer = page(path, query, lambda **_: doc or status_doc())
    return answer.status, answer.body.decode()


def test_every_value_is_escaped_on_every_view_and_in_diff_html() -> None:
    pages = [
        get("/")[1],
        get("/sources/apps")[1],
        get("/sources/apps/objects/core/ConfigMap/team/evil")[1],
        diff_html(status_doc()),
    ]
    for html in pages:
        assert "<script>alert" not in html and "<b>live" not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in pages[2]  # shown as text
    assert "&lt;b&gt;live&lt;/b&gt;" in pages[2]
    assert "render: bad &lt;script&gt;" in pages[0]


def test_no_inline_script_or_style_and_no_external_fetch() -> None:
    for html in (get("/")[1], get("/sources/apps")[1], get("/sources/apps/objects/apps/Deployment/team/web")[1]):
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
        assert scripts == [(' src="/static/app.js" defer', "")]
        assert " style=" not in html and "<style" not in html
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "frame-ancestors 'none'" in CSP and "script-src 'self'" in CSP


def test_secret_values_are_masked_even_if_they_arrive_unmasked() -> None:
    code, html = get("/sources/apps/objects/core/Secret/team/creds")
    assert code == 200 and ".data.password" in html
    assert "hunter2" not in html and "***" in html
    assert "hunter2" not in diff_html(status_doc())


def test_object_page_shows_desired_live_owner_actor_timeline_and_fight() -> None:
    code, html = get("/sources/apps/objects/apps/Deployment/team/web")
    assert code == 200
    assert "kubectl (Update, subresource scale)" in html and "kubectl scale" in html
    assert "ownership timeline of <code>.spec.replicas</code>: 2 values" in html
    assert "Git (this tool)" in html  # gitops-sync's own record, in words
    assert "fought over by <strong>gitops-sync and kubectl</strong>" in html


def test_filter_by_query_parameters() -> None:
    def names(query: str) -> list[str]:
        html = get("/sources/apps", query)[1]
        return re.findall(r'<span class="name">([^<]*)</span>', html)

    assert sorted(names("")) == ["calm", "creds", "evil", "web"]
    assert names("state=synced") == ["calm"]
    assert sorted(names("state=changed")) == ["creds", "evil", "web"]
    assert names("kind=secret") == ["creds"]
    assert names("q=team+web") == ["web"]
    assert names("q=nothing-like-this") == []
    assert names("state=bogus&page=x") == names("")  # unknown values are ignored, not errors
    assert view.Filter.parse({"q": ["a b"], "state": ["drifted"], "page": ["2"]}).query(page=3) == (
        "?q=a+b&state=drifted&page=3"
    )


def test_unknown_source_object_and_page_are_404() -> None:
    assert get("/sources/nope")[0] == 404
    assert get("/sources/apps/objects/core/ConfigMap/team/none")[0] == 404
    assert get("/sources/apps/whatever")[0] == 404
    assert page("/static/nope.js", "", lambda **_: {}).status == 404


def test_many_sources_are_listed() -> None:
    a, b = status_doc(), status_doc()
    b["inventory"] = {"name": "other", "namespace": "x", "sourceIdentity": "/other"}
    html = get("/", doc={"sources": [a, b]})[1]
    assert 'href="/sources/apps"' in html and 'href="/sources/other"' in html
    assert get("/sources/other", doc={"sources": [a, b]})[0] == 200


class _Structure(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def test_diff_html_is_one_self_contained_file() -> None:
    html = diff_html(status_doc())
    parser = _Structure()
    parser.feed(html)
    assert "script" not in parser.tags and "link" not in parser.tags and "style" in parser.tags
    assert "kubectl scale" in html and ".spec.replicas" in html


def _app(decision: Decision | None = None, auth: Callable[[str, str | None], Decision] | None = None) -> _App:
    """The page's WSGI app over `status_doc()`; every request gets `decision`, or asks `auth` (None: no auth)."""
    endpoints = Endpoints(
        healthy=lambda: (True, "ok"),
        ready=lambda: (True, "ok"),
        metrics=lambda: b"",
        status=lambda **_: status_doc(),
        webhook=lambda h, b: WebhookResult(False, 400, "no"),
    )
    return _App(endpoints, (lambda path, header: decision) if decision else auth, 1024, 2)


def _call(app: _App, path: str, method: str = "GET") -> tuple[str, dict[str, str], bytes]:
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"], got["headers"] = status, dict(headers)

    body = b"".join(app({"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": ""}, start_response))
    return got["status"], got["headers"], body


def test_the_daemon_serves_the_page_with_security_headers_and_behind_auth() -> None:
    status, headers, body = _call(_app(), "/")
    assert status == "200 OK" and headers["Content-Type"].startswith("text/html")
    assert headers["Content-Security-Policy"] == CSP and headers["X-Content-Type-Options"] == "nosniff"
    status, headers, body = _call(_app(), "/static/app.css")
    assert status == "200 OK" and headers["Content-Type"].startswith("text/css") and b".badge" in body
    assert _call(_app(), "/", "POST")[0].startswith("405")
    refused = _app(Decision(401, "a bearer token is required"))
    for path in ("/", "/sources/apps", "/sources/apps/objects/core/Secret/team/creds", "/status"):
        status, headers, body = _call(refused, path)
        assert status == "401 Unauthorized" and b"hunter2" not in body and b"team" not in body
    assert _call(refused, "/")[1]["Content-Security-Policy"] == CSP  # the sign-in form, as a 401
    assert _call(refused, "/static/app.css")[0] == "200 OK"  # the page's own files carry no data
    assert _call(refused, "/login")[0] == "200 OK"


def test_login_keeps_a_valid_token_in_an_httponly_cookie_and_pages_accept_it() -> None:
    import io

    seen: list[tuple[str, str | None]] = []

    def auth(path: str, header: str | None) -> Decision:
        seen.append((path, header))
        return Decision(200, "ok") if header == "Bearer good.token" else Decision(401, "not valid")

    app = _app(auth=auth)

    def post(token: str) -> tuple[str, dict[str, str]]:
        body = f"token={token}".encode()
        got: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]]) -> None:
            got["status"], got["headers"] = status, dict(headers)

        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/login",
            "QUERY_STRING": "",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
        }
        b"".join(app(environ, start_response))
        return got["status"], got["headers"]

    assert post("bad")[0] == "401 Unauthorized"
    status, headers = post("good.token")
    assert status == "303 See Other" and headers["Location"] == "/"
    assert headers["Set-Cookie"] == "gitops-sync-token=good.token; Path=/; HttpOnly; SameSite=Strict"
    got: dict[str, Any] = {}
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/sources/apps",
        "QUERY_STRING": "",
        "HTTP_COOKIE": "a=b; gitops-sync-token=good.token",
    }
    b"".join(app(environ, lambda s, h: got.update(status=s)))
    assert got["status"] == "200 OK" and seen[-1] == ("/", "Bearer good.token")  # every page path is `/` for RBAC
    environ = {**environ, "PATH_INFO": "/status"}  # the cookie is for the page only: the API needs the header
    b"".join(app(environ, lambda s, h: got.update(status=s)))
    assert got["status"] == "401 Unauthorized"


def test_diff_and_sync_offer_html_output() -> None:
    import io

    from gitops_sync.plan.changeset import Action, ChangeSet, Entry, FieldChange
    from gitops_sync.resource import ObjectKey

    cs = ChangeSet(
        revision="abc",
        source="/repo",
        inventory="apps",
        entries=[
            Entry(
                ObjectKey("", "ConfigMap", "ns", "cm"),
                "v1",
                Action.UPDATE,
                drift=[FieldChange(".data.x", EVIL, "live", "kubectl-edit", "Update", "", "kubectl edit")],
            )
        ],
    )
    from gitops_sync import cli

    out = io.StringIO()
    assert "html" in cli.OUTPUTS
    cli._write(cs, "html", out)
    html = out.getvalue()
    assert html.startswith("<!doctype html>") and "kubectl edit" in html and "&lt;script&gt;" in html
    assert "<script" not in html


def test_a_terminating_object_is_its_own_state_with_what_holds_it() -> None:
    held = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "namespace": "team",
        "name": "held",
        "action": "terminating",
        "message": "deletion pending: finalizer example.com/hold since 2026-01-01T00:00:00Z; left Git",
        "terminating": {"since": "2026-01-01T00:00:00Z", "finalizers": ["example.com/hold"], "inGit": False},
        "drift": [],
        "conflicts": [],
    }
    assert view.state_of(held) == "terminating"  # a `diff -o json` document: no daemon state
    doc = status_doc()
    doc["objects"].append(held)
    assert view.source_of(doc).states["terminating"] == 1
    html = page("/sources/apps", "state=terminating", lambda **_: doc).body.decode()
    assert re.findall(r'<span class="name">([^<]*)</span>', html) == ["held"]
    assert 'badge st-terminating">terminating<' in html and "deletion pending: finalizer example.com/hold" in html
    changed = page("/sources/apps", "state=changed", lambda **_: doc).body.decode()
    assert "held" in re.findall(r'<span class="name">([^<]*)</span>', changed), "not in sync"
    assert "deletion pending" in diff_html({**doc, "objects": [held]})
