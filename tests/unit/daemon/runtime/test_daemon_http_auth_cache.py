"""The HTTP server's auth gate and its limits, with stand-in callables (the real TokenReview and
SubjectAccessReview are in tests/integration/test_daemon_http_auth.py); the busy-port message."""

from __future__ import annotations

import socket
import subprocess
import sys
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.daemon.reconcile.triggers import verify_webhook
from gitops_sync.daemon.runtime.auth import Decision, KubernetesAuth, TtlCache
from gitops_sync.daemon.serving.http import Endpoints, HttpServer, ListenError
from tests.unit.fakes import FakeClock

REPO = Path(__file__).resolve().parents[4]


class Gate:
    """An authorizer that lets through only `Bearer good` and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None]] = []
        self.down = False

    def __call__(self, path: str, authorization: str | None) -> Decision:
        self.asked.append((path, authorization))
        if self.down:
            return Decision(503, "cannot check the token now: API server away")
        if authorization is None:
            return Decision(401, "a bearer token is required")
        return Decision(200, "ok") if authorization == "Bearer good" else Decision(403, "may not")


def boom() -> bytes:
    raise RuntimeError("password=hunter2 in an exception")


@pytest.fixture
def gated() -> Iterator[tuple[HttpServer, Gate]]:
    gate = Gate()
    srv = HttpServer(
        "127.0.0.1:0",
        Endpoints(
            healthy=lambda: (True, "ok"),
            ready=lambda: (True, "ok"),
            metrics=boom,
            status=lambda full_history=False: {"full": full_history},
            webhook=lambda headers, body: verify_webhook(headers, body, b"s"),
        ),
        auth=gate,
    ).start()
    try:
        yield srv, gate
    finally:
        srv.stop()


def get(srv: HttpServer, path: str, token: str | None = None, method: str = "GET") -> tuple[int, bytes, dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(f"http://127.0.0.1:{srv.port}{path}", headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status), r.read(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return int(e.code), e.read(), {k.lower(): v for k, v in e.headers.items()}


def _idle_endpoints() -> Endpoints:
    """Endpoints of a server only started and stopped: healthy, ready, nothing else to say."""
    return Endpoints(
        healthy=lambda: (True, "ok"),
        ready=lambda: (True, ""),
        metrics=lambda: b"",
        status=lambda full_history=False: {},
        webhook=lambda h, b: verify_webhook(h, b, None),
    )


def test_probes_and_webhook_are_open_everything_else_passes_the_gate(gated: tuple[HttpServer, Gate]) -> None:
    srv, gate = gated
    gate.down = True
    assert get(srv, "/healthz")[0] == 200 and get(srv, "/readyz")[0] == 200 and get(srv, "/livez")[0] == 200
    assert gate.asked == []
    code, body, headers = get(srv, "/status")
    assert (code, headers.get("retry-after")) == (503, "5") and b"API server away" in body
    gate.down = False
    code, _, headers = get(srv, "/status?history=all")
    assert code == 401 and headers["www-authenticate"].startswith("Bearer")
    assert gate.asked[-1] == ("/status", None)  # the path without the query
    assert get(srv, "/status", "other")[0] == 403
    code, body, _ = get(srv, "/status?history=all", "good")
    assert (code, body) == (200, b'{\n  "full": true\n}\n')
    assert get(srv, "/", "other")[0] == 403 and get(srv, "/ui/x")[0] == 401  # any future page is behind it
    assert get(srv, "/nope", "good")[0] == 404
    req = urllib.request.Request(f"http://127.0.0.1:{srv.port}/hooks/git", data=b"{}", headers={"X-Gitlab-Token": "s"})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 202
    assert ("/hooks/git", None) not in gate.asked


def test_a_failing_endpoint_is_a_500_without_the_exception_text(gated: tuple[HttpServer, Gate]) -> None:
    srv, _ = gated
    code, body, _ = get(srv, "/metrics", "good")
    assert code == 500 and b"hunter2" not in body and b"log" in body


def test_head_has_no_body_and_wrong_methods_are_405(gated: tuple[HttpServer, Gate]) -> None:
    srv, _ = gated
    code, body, headers = get(srv, "/healthz", method="HEAD")
    assert (code, body, headers["content-length"]) == (200, b"", "3")
    code, _, headers = get(srv, "/healthz", method="DELETE")
    assert (code, headers["allow"]) == (405, "GET, HEAD")
    assert get(srv, "/status", "good", method="PUT")[0] == 405
    assert get(srv, "/hooks/git")[0] == 405


def test_ttl_cache_expires_and_keeps_at_most_size_entries() -> None:
    clock = FakeClock(0.0)
    cache: TtlCache[str, int] = TtlCache(2, clock=clock)
    cache.put("a", 1, ttl=10)
    cache.put("b", 2, ttl=1)
    assert cache.get("a") == 1  # a is now the most recently used
    cache.put("c", 3, ttl=10)  # evicts b, the least recently used
    assert (cache.get("b"), cache.get("a"), cache.get("c"), len(cache)) == (None, 1, 3, 2)
    clock.advance(10)
    assert cache.get("a") is None and cache.get("c") is None and len(cache) == 0


def test_a_request_without_a_bearer_token_never_reaches_the_api_server() -> None:
    class NoCalls:
        def request(self, *args: object, **kwargs: object) -> object:
            raise AssertionError("no API request without a token")

    auth = KubernetesAuth(NoCalls())  # type: ignore[arg-type]
    for header in (None, "", "Bearer", "Bearer   ", "Basic dXNlcjpwYXNz", "token abc"):
        assert auth.check("/metrics", header).status == 401, header


def test_the_review_caches_hold_digests_not_the_long_paths_asked_for() -> None:
    """Any authenticated user (a denied one too) may ask for any path: 1,500 distinct 60 kB paths used to
    keep 1,024 of them (~61 MB) in the access cache; now each entry is a 32-byte digest."""

    class Api:
        def request(self, method: str, path: str, *, body: dict[str, Any], timeout: float) -> dict[str, Any]:
            if path.endswith("tokenreviews"):
                return {"status": {"authenticated": True, "user": {"username": "someone", "groups": ["g"]}}}
            return {"status": {"allowed": False, "reason": "no RBAC rule"}}

    auth = KubernetesAuth(Api(), size=1024)  # type: ignore[arg-type]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(1500):
            decision = auth.check(f"/{i}-" + "x" * 60_000, "Bearer a-valid-token")
            assert decision.status == 403
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(auth._access) == 1024
    assert kept < 2 * 1024 * 1024, kept


def test_a_busy_port_names_the_address() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ListenError) as err:
            HttpServer(
                f"127.0.0.1:{port}",
                _idle_endpoints(),
            )
        assert str(err.value) == f"cannot listen on 127.0.0.1:{port}: address already in use"


def test_run_on_a_busy_port_exits_2_naming_it_without_a_traceback(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"  # loaded, never contacted: the port is checked first
    kubeconfig.write_text(
        '{"apiVersion": "v1", "kind": "Config", "current-context": "c", '
        '"clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}], '
        '"users": [{"name": "u", "user": {"token": "t"}}], '
        '"contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}'
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "gitops_sync",
                "run",
                "--repo",
                str(tmp_path),
                "--kubeconfig",
                str(kubeconfig),
                "--http-addr",
                f"127.0.0.1:{port}",
                "--http-auth",
                "kubernetes",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"error: cannot listen on 127.0.0.1:{port}: address already in use\n"


def test_stop_leaves_no_thread_and_no_socket_behind() -> None:
    import os
    import threading

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    # Compare thread identities and an fd ceiling, not totals: threads or sockets other tests left behind may end
    # (or be collected) while this runs, which must not count as a leak of ours.
    threads, before = set(threading.enumerate()), fds()
    for _ in range(10):
        srv = HttpServer(
            "127.0.0.1:0",
            _idle_endpoints(),
        ).start()
        idle = socket.create_connection(("127.0.0.1", srv.port))  # open while it stops
        assert get(srv, "/healthz")[0] == 200
        srv.stop()
        idle.close()
    never_started = HttpServer(
        "127.0.0.1:0",
        _idle_endpoints(),
    )
    never_started.stop()
    left = set(threading.enumerate()) - threads
    assert not left, left
    assert fds() <= before
