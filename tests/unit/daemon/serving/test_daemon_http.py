"""HTTP endpoints with stand-in callables: routes, status codes, the webhook size limit; and report helpers."""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from gitops_sync.daemon.reconcile.reporter import describe as _describe
from gitops_sync.daemon.reconcile.reporter import fingerprint as _fingerprint
from gitops_sync.daemon.reconcile.triggers import WebhookResult, verify_webhook
from gitops_sync.daemon.runtime.metrics import Metrics, object_state
from gitops_sync.daemon.serving.http import Endpoints, HttpServer, Limits, parse_addr
from gitops_sync.plan.changeset import Action, Entry, FieldChange
from gitops_sync.resource import ObjectKey
from tests.reliability.http_target import stand_in


@pytest.fixture
def server() -> Iterator[tuple[HttpServer, list[bytes], dict[str, bool]]]:
    hooks: list[bytes] = []
    state = {"ready": False}
    metrics = Metrics()
    metrics.queue_depth.set(3)

    def webhook(headers: dict[str, str], body: bytes) -> WebhookResult:
        result = verify_webhook(headers, body, b"s")
        if result.ok:
            hooks.append(body)
        return result

    srv = HttpServer(
        "127.0.0.1:0",
        Endpoints(
            healthy=lambda: (True, "ok"),
            ready=lambda: (state["ready"], "ok" if state["ready"] else "first sync not complete"),
            metrics=metrics.exposition,
            status=lambda full_history=False: {"revision": "abc", "objects": [], "fullHistory": full_history},
            webhook=webhook,
        ),
    ).start()
    try:
        yield srv, hooks, state
    finally:
        srv.stop()


def call(
    srv: HttpServer, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.port}{path}",
        data=body,
        headers=headers or {},
        method="POST" if body is not None else "GET",
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


def test_probes_status_and_metrics(server: Any) -> None:
    srv, _, state = server
    assert call(srv, "/healthz") == (200, b"ok\n")
    assert call(srv, "/readyz") == (503, b"first sync not complete\n")
    state["ready"] = True
    assert call(srv, "/readyz")[0] == 200
    code, body = call(srv, "/status")
    assert code == 200 and json.loads(body)["revision"] == "abc"
    code, body = call(srv, "/metrics")
    assert code == 200 and b"gitops_sync_queue_depth 3.0" in body
    assert call(srv, "/nope")[0] == 404
    assert call(srv, "/hooks/git")[0] == 405


def test_webhook_route(server: Any) -> None:
    srv, hooks, _ = server
    assert call(srv, "/hooks/git", b"{}", {"X-Gitlab-Token": "s"})[0] == 202
    assert call(srv, "/hooks/git", b"{}", {"X-Gitlab-Token": "wrong"})[0] == 401
    assert hooks == [b"{}"]
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    conn.putrequest("POST", "/hooks/git")
    conn.putheader("Content-Length", str(5 * 1024 * 1024 + 1))  # refused before the body is read
    conn.putheader("X-Gitlab-Token", "s")
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()
    assert call(srv, "/elsewhere", b"{}")[0] == 404


def test_parse_addr() -> None:
    assert parse_addr(":8080") == ("", 8080)
    assert parse_addr("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_addr("[::]:9090") == ("::", 9090)
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_addr("8080")


def test_event_text_names_fields_and_managers_but_never_secret_values() -> None:
    change = FieldChange(".data.password", desired="bmV3", live="b2xk", manager="kubectl-edit", operation="Update")
    text = _describe(ObjectKey("", "Secret", "ns", "s"), [change])
    assert ".data.password" in text and "kubectl-edit" in text
    assert "bmV3" not in text and "b2xk" not in text
    scale = FieldChange(
        ".spec.replicas", desired=3, live=10, manager="kubectl", operation="Update", subresource="scale"
    )
    assert _describe(ObjectKey("apps", "Deployment", "ns", "d"), [scale]) == (
        ".spec.replicas: 10 (kubectl, Update/scale) -> 3"
    )


def test_fingerprint_ignores_status_and_bookkeeping_only() -> None:
    obj = {
        "metadata": {"name": "a", "resourceVersion": "1", "managedFields": [1]},
        "spec": {"x": 1},
        "status": {"ready": 0},
    }
    same = {
        "metadata": {"name": "a", "resourceVersion": "2", "managedFields": [2]},
        "spec": {"x": 1},
        "status": {"ready": 3},
    }
    changed = {**same, "spec": {"x": 2}}
    assert _fingerprint(obj) == _fingerprint(same) != _fingerprint(changed)


def test_object_states() -> None:
    key = ObjectKey("", "ConfigMap", "ns", "c")
    conflict = Entry(key, "v1", Action.CONFLICT, conflicts=[FieldChange(".data.a")])
    assert object_state(conflict, applied=False, forcing=True) == "drifted"
    assert object_state(conflict, applied=True, forcing=False) == "conflict"
    assert object_state(Entry(key, "v1", Action.UPDATE), applied=True, forcing=True) == "synced"
    assert object_state(Entry(key, "v1", Action.UPDATE), applied=False, forcing=True) == "drifted"
    assert object_state(Entry(key, "v1", Action.CREATE), applied=False, forcing=True) == "missing"
    assert object_state(Entry(key, "v1", Action.ERROR), applied=True, forcing=True) == "error"


def test_run_reads_every_option_from_gitops_sync_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The container is configured by environment: check the names the Deployment and README use."""
    import click
    from click.testing import CliRunner

    from gitops_sync.daemon import command

    seen: dict[str, Any] = {}

    def fake_daemon(opts: Any) -> Any:
        seen["opts"] = opts
        raise click.exceptions.Exit(0)

    monkeypatch.setattr(command, "Daemon", fake_daemon)
    env = {
        "GITOPS_SYNC_REPO": "https://git.example/r.git",
        "GITOPS_SYNC_PATH": "apps",
        "GITOPS_SYNC_NAME": "inv",
        "GITOPS_SYNC_NAMESPACE": "apps",
        "GITOPS_SYNC_PRUNE": "true",
        "GITOPS_SYNC_INTERVAL": "30",
        "GITOPS_SYNC_LEADER_ELECT": "true",
        "GITOPS_SYNC_LEADER_ELECT_IDENTITY": "pod-0",
        "POD_NAMESPACE": "gitops-sync",
        "GITOPS_SYNC_WEBHOOK_SECRET": "s",
    }
    result = CliRunner().invoke(command.run, [], env=env)
    assert result.exit_code == 0, result.output
    opts = seen["opts"]
    assert (opts.source.repo, opts.source.path, opts.pass_opts.name, opts.pass_opts.namespace) == (
        "https://git.example/r.git",
        "apps",
        "inv",
        "apps",
    )
    assert opts.pass_opts.prune and opts.interval == 30 and opts.leader_elect
    assert (opts.identity, opts.leader_namespace, opts.webhook_secret) == ("pod-0", "gitops-sync", b"s")
    assert opts.self_heal and opts.pass_opts.policy.value == "force"


def test_status_lists_every_field_history_only_when_asked(server: Any) -> None:
    srv, _hooks, _state = server
    code, body = call(srv, "/status")
    assert code == 200 and json.loads(body)["fullHistory"] is False
    code, body = call(srv, "/status?history=all")
    assert code == 200 and json.loads(body)["fullHistory"] is True


def test_at_the_connection_cap_the_stalest_slow_client_makes_room_for_a_probe() -> None:
    """Cap 20: 30 connections that sent half a request hold the cap; each newer one closes the oldest
    (which are then seen closed, in order), and a probe is answered at once instead of in the backlog."""
    srv = HttpServer("127.0.0.1:0", stand_in(), limits=Limits(connections=20)).start()
    socks = []
    try:
        for _ in range(30):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            s.sendall(b"GET /status HTTP/1.1\r\nHost: t\r\nX-Slow: a")
            socks.append(s)
            time.sleep(0.01)  # accepted in order
        t0 = time.monotonic()
        status, _ = call(srv, "/healthz")
        assert status == 200 and time.monotonic() - t0 < 1.0
        time.sleep(0.3)  # closing is the event loop's
        closed = [i for i, s in enumerate(socks) if select.select([s], [], [], 0)[0] and s.recv(1) == b""]
        assert closed == list(range(len(closed))) and len(closed) >= 30 - 18, closed  # the oldest, first
        assert srv._server.evicted >= len(closed)
    finally:
        for s in socks:
            s.close()
        srv.stop()


def test_the_fleet_refuses_what_would_lend_the_controllers_access_to_tenants() -> None:
    """`run` without --repo: no Git credential flag, and no --kustomize-allow-external (remote bases fetched
    with the controller's Git credentials, files of its disk read into a tenant's objects)."""
    from click.testing import CliRunner

    from gitops_sync.daemon import command

    result = CliRunner().invoke(command.run, ["--kustomize-allow-external"], env={"GITOPS_SYNC_REPO": ""})
    assert result.exit_code == 2 and "--kustomize-allow-external is for --repo" in result.output, result.output
    result = CliRunner().invoke(command.run, [], env={"GITOPS_SYNC_REPO": "", "GITOPS_SYNC_GIT_PASSWORD": "x"})
    assert result.exit_code == 2 and "Git credential flags and variables are for --repo" in result.output
