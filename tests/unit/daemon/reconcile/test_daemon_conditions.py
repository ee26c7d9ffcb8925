"""The cluster probe against a real HTTP server that answers, hangs (like a SIGSTOPped API server) or fails."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.reconcile.conditions import ClusterProbe, Condition


class _Api(BaseHTTPRequestHandler):
    mode = "ok"  # ok | hang | 500 | 403
    release = threading.Event()  # ends a hang (set at teardown, so no handler thread outlives the test)
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive handler at teardown

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        mode = type(self).mode
        if mode == "hang":
            type(self).release.wait(3)
        code, body = {"ok": (200, b"ok"), "hang": (200, b"ok"), "500": (500, b"[-]etcd failed"), "403": (403, b"{}")}[
            mode
        ]
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[Client, type[_Api]]]:
    handler = type("Api", (_Api,), {"mode": "ok", "release": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = False  # server_close() joins the handler threads: nothing left for the next test
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{server.server_address[1]}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    client = Client(kubeconfig, pool_size=1, timeout=1, probe_timeout=0.5)
    try:
        yield client, handler
    finally:
        handler.release.set()
        client.close()
        server.shutdown()
        server.server_close()
        serving.join(2)


def test_probe_tells_ok_hung_not_ready_and_answering_apart(api: tuple[Client, type[_Api]]) -> None:
    client, handler = api
    cond = Condition("cluster")
    changes: list[tuple[bool, str]] = []
    probe = ClusterProbe(client, cond, on_change=lambda ok, e: changes.append((ok, e)))
    assert probe.probe() and cond.ok and changes == [(True, "")]

    handler.mode = "hang"
    t0 = time.monotonic()
    assert not probe.probe()
    assert time.monotonic() - t0 < 1.5, "the probe's own timeout bounds it"
    assert not cond.ok and "no answer within 0.5s" in cond.error
    assert len(changes) == 2 and changes[-1][0] is False

    handler.mode = "500"
    assert not probe.probe() and "/readyz answered 500" in cond.error
    assert len(changes) == 2, "no transition while it stays down"

    handler.mode = "403"  # answers, even if /readyz is not open to us: reachable
    assert probe.probe() and cond.ok and cond.error == ""
    assert changes[-1] == (True, "")
    doc = cond.to_dict(with_revision=False)
    assert doc["ok"] is True and doc["since"] and "revision" not in doc


def test_probe_says_refused_when_nothing_listens(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    cond = Condition("cluster")
    with Client(kubeconfig, probe_timeout=0.5) as client:
        assert not ClusterProbe(client, cond).probe()
    assert "Connection refused" in cond.error and "no answer" not in cond.error, cond.error


def test_probe_loop_polls_fast_while_failing_and_poke_wakes_it(api: tuple[Client, type[_Api]]) -> None:
    client, handler = api
    cond = Condition("cluster")
    probe = ClusterProbe(client, cond, interval=30, failing_interval=0.05)
    t = threading.Thread(target=probe.run, daemon=True)
    t.start()
    time.sleep(0.2)
    assert probe.probes == 1, "healthy: next probe only after the interval"
    handler.mode = "500"
    probe.poke()
    time.sleep(0.3)
    assert not cond.ok and probe.probes >= 4, probe.probes
    handler.mode = "ok"
    time.sleep(0.2)
    assert cond.ok
    probe.stop()
    t.join(2)
    assert not t.is_alive()


def test_condition_records_transitions_and_keeps_the_revision() -> None:
    c = Condition("source")
    assert c.ok and c.state is None
    assert c.set(True, revision="abc")
    assert not c.set(True, revision="abc")
    assert c.set(False, "render failed", "def")
    assert c.to_dict()["revision"] == "def" and c.error == "render failed" and not c.ok
    assert not c.set(False, "another error")
    assert c.error == "another error" and c.to_dict()["revision"] == "def"
