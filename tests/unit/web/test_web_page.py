"""The web page's templates and views: escaping, masking, filtering, headers, `diff -o html`."""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

from gitops_sync.daemon.reconcile.triggers import WebhookResult
from gitops_sync.daemon.runtime.auth import Decision
from gitops_sync.daemon.serving.routes import Endpoints, Routes
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


def _app(
    decision: Decision | None = None,
    auth: Callable[[str, str | None], Decision] | None = None,
    *,
    doc: Callable[[], dict[str, Any]] = status_doc,
    tenants: tuple[str, str] | None = None,
) -> Routes:
    """The page's WSGI app over `doc()`; every request gets `decision`, or asks `auth` (None: no auth);
    `tenants`: a fleet's per-tenant page (Endpoints.tenant_resource)."""
    endpoints = Endpoints(
        healthy=lambda: (True, "ok"),
        ready=lambda: (True, "ok"),
        metrics=lambda: b"",
        status=lambda **_: doc(),
        webhook=lambda h, b: WebhookResult(False, 400, "no"),
        tenant_resource=tenants,
    )
    return Routes(endpoints, (lambda path, header: decision) if decision else auth, 1024, 2)


def _call(app: Routes, path: str, method: str = "GET") -> tuple[str, dict[str, str], bytes]:
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
    from gitops_sync.cli import output

    out = io.StringIO()
    assert "html" in output.OUTPUTS
    output.write(cs, "html", out)
    html = out.getvalue()
    assert html.startswith("<!doctype html>") and "kubectl edit" in html and "&lt;script&gt;" in html
    assert "<script" not in html


def test_diff_html_names_git_changes_planned_and_has_the_why_and_where_columns() -> None:
    """`diff -o html` put a `drifted` badge on every object Git was about to change or prune and had no `why` /
    `where in Git` columns (markdown had them). Fails on the code before."""
    from tests.unit.report.test_report import pull_request

    html = diff_html(pull_request().to_dict())
    changes = dict(
        re.findall(r'<span class="name">([^<]*)</span></a></td>\s*<td data-label="change"><span[^>]*>([^<]*)<', html)
    )
    assert changes == {
        "minha-api": "planned change, drift",
        "api": "drift",
        "new": "planned create",
        "gone": "planned delete",
    }, changes
    badges = re.findall(r'<span class="badge st-(\w+)"[^>]*>([^<]*)</span>', html)
    assert ("drifted", "planned delete") not in badges and ("planned", "planned delete") in badges
    assert ("planned", "planned 2") in badges and ("drifted", "drift 1") in badges  # minha-api: 2 Git's, 1 kubectl's
    assert "<th>why</th><th>where in Git</th>" in html
    image = re.search(r'<tr class="k-planned">.*?\]\.image</code>.*?</tr>', html, re.S)
    assert image is not None and "git-changed" in image[0] and "apps/web.yaml:18:20" in image[0]
    replicas = re.findall(r'<tr class="k-drift">.*?</tr>', html, re.S)
    assert len(replicas) == 2 and all("live-changed by kubectl (Update/scale)" in r for r in replicas)


def _record(value: Any, manager: str, operation: str, subresource: str = "", observed: str = "o") -> dict[str, Any]:
    return {
        "value": value,
        "manager": manager,
        "operation": operation,
        "subresource": subresource,
        "time": "t",
        "observed": observed,
    }


def _history(kind: str, name: str, fields: dict[str, list[dict[str, Any]]], group: str = "") -> dict[str, Any]:
    return {"group": group, "kind": kind, "namespace": "team", "name": name, "fields": fields}


def _cells(html: str, path: str) -> list[str]:
    """The text of each cell of the field row of `path` on an object page."""
    row = re.search(
        r"<tr class=\"k-[^\"]*\">\s*<td class=\"path\"[^>]*><code>" + re.escape(path) + r"</code>.*?</tr>", html, re.S
    )
    assert row is not None, html
    return [
        re.sub(r"<[^>]+>", " ", c).split() and " ".join(re.sub(r"<[^>]+>", " ", c).split())
        for c in re.findall(r"<td[^>]*>(.*?)</td>", row[0], re.S)
    ]


def test_an_object_deleted_by_hand_under_detect_only_has_no_live_column_and_nothing_in_sync() -> None:
    """A Service deleted by hand (`--detect-only`): every field was shown `in sync` with the daemon's last
    recorded values as the live ones. Fails on the code before."""
    doc = status_doc()
    doc["objects"].append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "namespace": "team",
            "name": "web",
            "action": "create",
            "state": "missing",
            "message": "would create",
            "drift": [],
            "conflicts": [],
            "coOwners": [],
        }
    )
    doc["history"].append(
        _history(
            "Service", "web", {".spec.ports[port=80].targetPort": [_record(8080, "gitops-sync", "Apply", "", "s1")]}
        )
    )
    code, html = get("/sources/apps/objects/core/Service/team/web", doc=doc)
    assert code == 200
    assert "in sync" not in html and "<th>live</th>" not in html
    assert "Not in the cluster" in html and "--detect-only" in html
    cells = _cells(html, ".spec.ports[port=80].targetPort")
    assert cells[1] == "missing" and cells[2] == "not compared" and cells[3].startswith("8080"), cells


def _yielded_doc() -> dict[str, Any]:
    doc = status_doc()
    doc["objects"].append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "namespace": "team",
            "name": "api",
            "action": "unchanged",
            "state": "synced",
            "message": "",
            "drift": [],
            "conflicts": [],
            "coOwners": [],
            "yielded": [
                {
                    "path": ".spec.replicas",
                    "desired": 3,
                    "live": 9,
                    "manager": "helm",
                    "operation": "Update",
                    "subresource": "",
                    "actor": "Helm",
                    "reason": "fight",
                    "since": "2026-12-01T10:05:00Z",
                    "advice": "decide who owns .spec.replicas: remove it from Git or add an ignore rule if helm "
                    "should own it, else stop helm from writing it",
                    "autoscaler": None,
                    "changes": [],
                }
            ],
        }
    )
    doc["history"].append(
        _history(
            "Deployment",
            "api",
            {".spec.replicas": [_record(3, "gitops-sync", "Apply"), _record(9, "helm", "Update")]},
            group="apps",
        )
    )
    return doc


def test_a_yielded_field_is_shown_as_yielded_with_git_and_live_value_the_other_manager_and_how_to_resume() -> None:
    """A field the daemon yielded (Git 3, live 9) was shown as "desired (Git) 9, in sync" and its object as
    synced: the templates never read `yielded`. Fails on the code before."""
    doc = _yielded_doc()
    code, html = get("/sources/apps/objects/apps/Deployment/team/api", doc=doc)
    assert code == 200 and "in sync" not in html
    cells = _cells(html, ".spec.replicas")
    assert cells[1] == "yielded" and cells[2] == "3" and cells[3] == "9", cells
    assert "helm (Update)" in cells[4] and "Helm" in cells[4]
    assert "yielded to Helm" in html and "fight" in html
    assert "correcting resumes when Git&#39;s value changes" in html and "--fight-window" in html
    assert "remove it from Git or add an ignore rule" in html
    listing = get("/sources/apps", doc=doc)[1]
    row = next(r for r in re.findall(r'<tr class="row.*?</tr>', listing, re.S) if '"name">api<' in r)
    assert 'st-row-yielded"' in row and "yielded 1" in row and '<strong class="actor">Helm</strong>' in row


def _summary(html: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"<dt>(\w+)</dt><dd>(\d+)</dd>", html)}


def _row_states(html: str) -> list[str]:
    return re.findall(r'<tr class="row st-row-(\w+)">', html)


def test_summary_counts_equal_the_rows_and_no_row_says_conflict_the_summary_does_not_count() -> None:
    """The daemon's `--on-conflict force` in detect-only counts a plan's conflict as drift (self-heal would take
    the fields back): the card said `conflict 0` while those rows said `conflict` (action and badge). Fails on the
    code before."""
    doc = _yielded_doc()
    for i in range(4):
        doc["objects"].append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "namespace": "team",
                "name": f"taken-{i}",
                "action": "conflict",
                "state": "drifted",
                "message": "1 field(s) owned by other managers with different values",
                "drift": [],
                "conflicts": [
                    {
                        "path": ".data.a",
                        "desired": "1",
                        "live": "2",
                        "manager": "kubectl-edit",
                        "operation": "Update",
                        "subresource": "",
                        "actor": "kubectl edit",
                        "reason": "live-changed",
                    }
                ],
                "coOwners": [],
            }
        )
    listing = get("/sources/apps", doc=doc)[1]
    states = _row_states(listing)
    summary = _summary(listing)
    for state in view.STATES:
        assert summary[state] == states.count(state), (state, summary, states)
    rows_html = re.findall(r'<tr class="row.*?</tr>', listing, re.S)
    words = [re.sub(r"<[^>]+>", " ", r) for r in rows_html]  # what a reader sees of each row
    assert sum("conflict" in w for w in words) == summary["conflict"] == 0, words
    assert summary["drifted"] == 7 and summary["yielded"] == 1 and summary["synced"] == 1
    taken = next(r for r in rows_html if "taken-0" in r)
    assert "update (force)" in taken and "drift 1" in taken
    # the sources page shows the same counts
    assert _summary(get("/", doc=doc)[1]) == summary
    obj = get("/sources/apps/objects/core/ConfigMap/team/taken-0", doc=doc)[1]
    assert _cells(obj, ".data.a")[1] == "drift" and "--on-conflict force takes it back" in obj


def fleet_doc() -> dict[str, Any]:
    """A fleet's /status: GitSync team-a/web (suspended, depends on team-a/base) and team-b/db."""
    a, b = status_doc(), status_doc()
    for doc, ref, spec in (
        (a, "team-a/web", {"path": "apps/web", "revision": "main", "dependsOn": ["team-a/base"], "suspend": True}),
        (b, "team-b/db", {"path": "", "revision": "", "dependsOn": [], "suspend": False}),
    ):
        ns, name = ref.split("/")
        doc["inventory"] = {"name": f"gitsync-{name}", "namespace": ns, "sourceIdentity": "/repo"}
        doc["daemon"]["gitsync"] = {"name": ref, "suspended": spec["suspend"], "ready": "True"}
        doc["daemon"]["spec"] = {"repository": "/repo", **spec}
    b["objects"][1]["drift"][0]["live"] = "team-b-secret-value"
    return {"fleet": {"sources": []}, "sources": [a, b]}


def test_a_fleet_names_each_source_by_its_gitsync_with_path_revision_dependson_and_suspend() -> None:
    """Sources were named by inventory (`gitsync-web`), without path, dependsOn or suspend. Fails on the code
    before."""
    doc = fleet_doc()
    html = get("/", doc=doc)[1]
    assert 'href="/sources/team-a/web"' in html and 'href="/sources/team-b/db"' in html
    card = html[html.index("team-a/web") : html.index("team-b/db")]
    assert "<code>apps/web</code>" in card and "<code>main</code>" in card and "<code>team-a/base</code>" in card
    assert ">suspended<" in card and "gitsync-web" in card  # the inventory is still named
    code, objects = get("/sources/team-a/web", doc=doc)
    assert code == 200 and 'href="/sources/team-a/web/objects/apps/Deployment/team/web"' in objects
    assert get("/sources/team-a/web/objects/apps/Deployment/team/web", doc=doc)[0] == 200
    assert get("/sources/team-a/web/", doc=doc)[0] == 200
    assert get("/sources/team-a", doc=doc)[0] == 404 and get("/sources/gitsync-web", doc=doc)[0] == 404


def test_a_reader_limited_to_its_gitsyncs_sees_no_other_source_nor_its_objects() -> None:
    doc = fleet_doc()
    asked: list[tuple[str, str]] = []

    def team_a(namespace: str, name: str) -> bool:
        asked.append((namespace, name))
        return namespace == "team-a"

    def see(path: str) -> tuple[int, str]:
        answer = page(path, "", lambda **_: doc, visible=team_a, reader="system:serviceaccount:team-a:dev")
        return answer.status, answer.body.decode()

    code, html = see("/")
    assert code == 200 and "team-a/web" in html and "team-b" not in html and "team-b-secret-value" not in html
    assert "system:serviceaccount:team-a:dev" in html
    assert see("/sources/team-a/web")[0] == 200
    for path in ("/sources/team-b/db", "/sources/team-b/db/objects/core/ConfigMap/team/evil"):
        code, body = see(path)
        assert code == 404 and "team-b-secret-value" not in body
    asked.clear()
    see("/sources/team-a/web")
    assert asked == [("team-a", "web")]  # one source's page asks about that source only
    nobody = page("/", "", lambda **_: doc, visible=lambda ns, name: False).body.decode()
    assert "team-a/web" not in nobody and "No GitSync you may" in nobody


def test_an_object_its_source_could_not_plan_never_shows_the_daemons_history_of_it() -> None:
    """The daemon keeps one history per object for every source that wants it: a tenant's refused object
    (an `error` entry) must not show what another source recorded of it."""
    doc = status_doc()
    doc["objects"].append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "namespace": "other",
            "name": "guarded",
            "action": "error",
            "state": "error",
            "message": '403 Forbidden: configmaps "guarded" is forbidden',
            "drift": [],
            "conflicts": [],
            "coOwners": [],
        }
    )

    def history(group: str, kind: str, ns: str, name: str) -> dict[str, list[dict[str, Any]]]:
        return {".data.k": [_record("only-the-cluster-knows", "gitops-sync", "Apply")]}

    guarded = page("/sources/apps/objects/core/ConfigMap/other/guarded", "", lambda **_: doc, history).body.decode()
    assert "403 Forbidden" in guarded and "only-the-cluster-knows" not in guarded
    web = page("/sources/apps/objects/core/ConfigMap/team/calm", "", lambda **_: doc, history).body.decode()
    assert "only-the-cluster-knows" in web  # a planned object: the history as before


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
