"""A fleet's web page per tenant: who the token is (TokenReview), then per GitSync whether it may `get` it
(SubjectAccessReview with resource attributes, cached). The real API server: tests/integration/test_web_browser.py."""

from __future__ import annotations

from typing import Any

from gitops_sync.daemon.runtime.auth import Decision, KubernetesAuth, Resource
from gitops_sync.daemon.serving.routes import Routes
from gitops_sync.errors import ClusterError
from tests.unit.web.test_web_page import _app, fleet_doc

GITSYNCS = ("gitops-sync.io", "gitsyncs")


def app(auth: Any, tenants: tuple[str, str] | None = GITSYNCS) -> Routes:
    return _app(auth=auth, doc=fleet_doc, tenants=tenants)


def call(a: Routes, path: str, token: str = "t") -> tuple[str, str]:
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"] = status

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "HTTP_AUTHORIZATION": f"Bearer {token}"}
    body = b"".join(a(environ, start_response))
    return got["status"], body.decode()


class Api:
    """TokenReview: the token is the user's name. SubjectAccessReview: `grants` (user, namespace, name);
    name "" grants the whole namespace; non-resource `/` for nobody."""

    def __init__(self, grants: set[tuple[str, str, str]]) -> None:
        self.grants = grants
        self.reviews: list[dict[str, Any]] = []
        self.down = False

    def request(self, method: str, path: str, *, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        if path.endswith("tokenreviews"):
            return {"status": {"authenticated": True, "user": {"username": body["spec"]["token"], "groups": []}}}
        if self.down:
            raise ClusterError("API server away")
        spec = body["spec"]
        self.reviews.append(spec)
        attrs = spec.get("resourceAttributes")
        if attrs is None:
            return {"status": {"allowed": False}}
        assert (attrs["verb"], attrs["group"], attrs["resource"]) == ("get", *GITSYNCS)
        key = (spec["user"], attrs.get("namespace", ""), attrs.get("name", ""))
        return {"status": {"allowed": key in self.grants}}


def test_each_token_sees_the_gitsyncs_it_may_get_asked_per_namespace_first_and_cached() -> None:
    api = Api({("alice", "team-a", ""), ("bob", "team-b", "db")})
    a = app(KubernetesAuth(api).check)  # type: ignore[arg-type]
    status, html = call(a, "/", "alice")
    assert status == "200 OK" and "team-a/web" in html and "team-b/db" not in html
    # alice: team-a namespace-wide (1 review); team-b refused namespace-wide, then by name (2)
    assert [r["resourceAttributes"].get("name", "") for r in api.reviews] == ["", "", "db"]
    assert all("nonResourceAttributes" not in r for r in api.reviews)  # `get /` is neither needed nor enough
    call(a, "/", "alice")
    assert len(api.reviews) == 3  # cached
    status, html = call(a, "/", "bob")
    assert "team-b/db" in html and "team-a/web" not in html
    assert call(a, "/sources/team-a/web", "bob")[0] == "404 Not Found"
    assert call(a, "/sources/team-b/db", "bob")[0] == "200 OK"
    status, html = call(a, "/", "carol")
    assert status == "200 OK" and "team-a/web" not in html and "team-b/db" not in html and "No GitSync" in html
    # the JSON API stays the operator's: `get /status` is still asked, and refused here
    assert call(a, "/status", "alice")[0] == "403 Forbidden"


def test_an_unanswered_access_review_is_a_503_never_an_open_or_an_empty_page() -> None:
    api = Api({("alice", "team-a", "")})
    a = app(KubernetesAuth(api).check)  # type: ignore[arg-type]
    api.down = True
    status, body = call(a, "/", "alice")
    assert status == "503 Service Unavailable" and "cannot check access now" in body and "team-a" not in body


def test_an_authorizer_without_per_object_answers_shows_no_source() -> None:
    asked: list[str] = []

    def gate(path: str, header: str | None) -> Decision:
        asked.append(path)
        return Decision(200, "ok", "someone")

    status, html = call(app(gate), "/")
    assert status == "200 OK" and "team-a/web" not in html and "team-b/db" not in html
    assert asked == [""]  # only who the token is
    status, html = call(app(gate, tenants=None), "/")  # a single-source daemon: `get /` shows everything
    assert "team-a/web" in html and "team-b/db" in html


def test_may_questions_and_path_questions_never_share_a_cache_entry() -> None:
    class Everything(Api):
        def request(self, method: str, path: str, *, body: dict[str, Any], timeout: float) -> dict[str, Any]:
            if path.endswith("subjectaccessreviews"):
                self.reviews.append(body["spec"])
                return {"status": {"allowed": "nonResourceAttributes" in body["spec"]}}
            return super().request(method, path, body=body, timeout=timeout)

    api = Everything(set())
    auth = KubernetesAuth(api)  # type: ignore[arg-type]
    decision = auth.check("/", "Bearer alice")
    assert decision.status == 200 and decision.may is not None
    question: Resource = ("get", *GITSYNCS, "team-a", "")
    assert decision.may(question) is False and decision.may(question) is False
    assert len(api.reviews) == 2  # `/`, then the GitSync question once
