"""A kubeconfig that is not trusted (a tenant's Secret) never makes this process run a command or read a file.

`ClusterConnection.open(..., trusted=False)` refuses exec plugins, auth providers and every file reference
(client-certificate, client-key, tokenFile, certificate-authority paths) and any key it does not know, naming
the keys and never a value; inline data opens. The same kubeconfig trusted (the CLI's own) is read as ever.
And each connection has its own client-side rate limit (`RateLimit`), a token bucket.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync.cluster.connection import ClusterConnection, Connections, UntrustedKubeconfigError, check_untrusted
from gitops_sync.cluster.throttle import RateLimit
from gitops_sync.errors import ApiUnavailableError, ClusterError
from tests.unit.fakes import FakeClock

SECRET_TOKEN = "s3cr3t-token-value"  # must never appear in a message


def kubeconfig(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", **(cluster or {})}}],
        "users": [{"name": "u", "user": {"token": SECRET_TOKEN, **(user or {})}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}],
        "current-context": "x",
    }


def as_bytes(doc: dict[str, Any]) -> bytes:
    return yaml.safe_dump(doc).encode()


def marker_exec(marker: Path) -> dict[str, Any]:
    """An exec plugin that leaves `marker` behind when it runs, and prints a credential (token `from-exec`)."""
    credential = json.dumps(
        {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": "from-exec"}}
    )
    script = f"open({str(marker)!r}, 'w').write('ran'); print({credential!r})"
    return {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": ["-c", script]}


@pytest.mark.parametrize(
    ("cluster", "user", "named", "why"),
    [
        (
            {},
            {"exec": {"command": "true", "apiVersion": "client.authentication.k8s.io/v1"}},
            "user.exec",
            "runs a command",
        ),
        ({}, {"auth-provider": {"name": "oidc", "config": {}}}, "user.auth-provider", "runs a command"),
        (
            {},
            {"client-certificate": "/etc/ssl/cert.pem", "client-key": "/etc/ssl/key.pem"},
            "user.client-certificate",
            "reads a file",
        ),
        ({}, {"client-key": "/root/.ssh/id_rsa"}, "user.client-key", "reads a file"),
        ({}, {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}, "user.tokenFile", "reads a file"),
        ({"certificate-authority": "/etc/kubernetes/pki/ca.crt"}, {}, "cluster.certificate-authority", "reads a file"),
        ({"proxy-url": "http://10.0.0.1:3128"}, {}, "cluster.proxy-url", "not inline data"),
        ({}, {"as": "system:admin"}, "user.as", "not inline data"),
    ],
)
def test_an_untrusted_kubeconfig_naming_a_command_or_a_file_is_refused(
    cluster: dict[str, Any], user: dict[str, Any], named: str, why: str
) -> None:
    doc = kubeconfig(cluster, user)
    with pytest.raises(UntrustedKubeconfigError) as refused:
        ClusterConnection.open(as_bytes(doc), trusted=False)
    message = str(refused.value)
    assert named in message and why in message
    assert SECRET_TOKEN not in message and "/etc/ssl" not in message and "/root" not in message  # keys, not values


def test_the_refused_exec_plugin_never_runs_and_the_trusted_one_does(tmp_path: Path) -> None:
    marker = tmp_path / "exec-ran"
    doc = kubeconfig(user={"exec": marker_exec(marker)})
    del doc["users"][0]["user"]["token"]
    with pytest.raises(UntrustedKubeconfigError, match=r"user\.exec \(runs a command"):
        ClusterConnection.open(as_bytes(doc), trusted=False)
    assert not marker.exists()
    path = tmp_path / "config"
    path.write_bytes(as_bytes(doc))  # the same file given as a path, untrusted: read as data, refused alike
    with pytest.raises(UntrustedKubeconfigError, match=r"user\.exec"):
        ClusterConnection.open(path, trusted=False)
    assert not marker.exists()
    # Trusted (the CLI's own kubeconfig): exec plugins work as in kubectl (the official loader runs it).
    with ClusterConnection.open(as_bytes(doc), trusted=True) as conn:
        assert conn.client._conn.loader == "official"
        assert conn.client._conn.headers()["authorization"] == "Bearer from-exec"
    assert marker.read_text() == "ran"


def test_an_untrusted_kubeconfig_with_inline_data_opens_with_the_native_reader() -> None:
    ca = base64.b64encode(b"not a certificate").decode()
    doc = kubeconfig({"insecure-skip-tls-verify": True, "tls-server-name": "api.example"}, {})
    with ClusterConnection.open(as_bytes(doc), trusted=False) as conn:
        assert conn.client.host == "https://127.0.0.1:6443"
        assert conn.client._conn.loader == "native"
        assert conn.client._conn.headers()["Authorization"] == f"Bearer {SECRET_TOKEN}"
        assert conn.name == "127.0.0.1:6443"  # no context named: the server names it
    check_untrusted(kubeconfig({"certificate-authority-data": ca}, {}), None)  # inline data: accepted


def test_an_untrusted_connection_never_falls_back_to_the_ambient_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ambient = tmp_path / "ambient"
    ambient.write_bytes(as_bytes(kubeconfig({}, {})))
    monkeypatch.setenv("KUBECONFIG", str(ambient))
    with pytest.raises(UntrustedKubeconfigError, match="needs its kubeconfig given"):
        ClusterConnection.open(None, trusted=False)
    for empty in (b"", b"null\n", b"- a list\n"):
        with pytest.raises(ClusterError, match="empty or not a mapping"):
            ClusterConnection.open(empty, trusted=False)
        with pytest.raises(ClusterError, match="empty or not a mapping"):
            ClusterConnection.open(empty, trusted=True)  # data given: never $KUBECONFIG in its place


def test_an_untrusted_kubeconfig_is_checked_for_the_context_it_uses() -> None:
    doc = kubeconfig({}, {})
    doc["users"].append({"name": "file-user", "user": {"tokenFile": "/etc/token"}})
    doc["contexts"].append({"name": "other", "context": {"cluster": "c", "user": "file-user"}})
    check_untrusted(doc, None)  # the current context holds inline data only
    check_untrusted(doc, "x")
    with pytest.raises(UntrustedKubeconfigError, match=r"context 'other' is refused: user\.tokenFile"):
        check_untrusted(doc, "other")
    with pytest.raises(UntrustedKubeconfigError, match="has no context 'missing'"):
        check_untrusted(doc, "missing")
    bad = kubeconfig({"server": "unix:///var/run/docker.sock"}, {})
    with pytest.raises(UntrustedKubeconfigError, match="must be an https://"):
        check_untrusted(bad, None)


def test_a_trusted_kubeconfig_given_as_data_reads_files_relative_to_nothing_but_its_paths(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("from-a-file\n")
    doc = kubeconfig({}, {"tokenFile": str(token)})
    del doc["users"][0]["user"]["token"]
    with ClusterConnection.open(as_bytes(doc), trusted=True, name="mine") as conn:
        assert conn.client._conn.headers()["Authorization"] == "Bearer from-a-file"
        assert conn.name == "mine"


def test_the_rate_limit_lets_a_burst_through_then_spaces_requests_at_qps() -> None:
    clock = FakeClock()
    limit = RateLimit(10, 3, clock=clock, sleep=clock.sleep)
    for _ in range(3):
        limit.take()
    assert clock.slept == 0.0  # the burst
    limit.take()
    assert clock.slept == pytest.approx(0.1)  # then one token every 1/qps
    limit.take()
    assert clock.slept == pytest.approx(0.2)
    clock.advance(10)  # idle: the bucket refills up to the burst, not more
    for _ in range(3):
        limit.take()
    assert clock.slept == pytest.approx(0.2)


def test_a_rate_limit_wait_past_the_deadline_is_not_sent() -> None:
    clock = FakeClock()
    limit = RateLimit(1, 1, clock=clock, sleep=clock.sleep)
    limit.take()
    with pytest.raises(ApiUnavailableError, match="rate limit"):
        limit.take(deadline=clock() + 0.5)
    assert clock.slept == 0.0
    limit.take(deadline=clock() + 5)  # the refused take gave its token back: one second, not two
    assert clock.slept == pytest.approx(1.0)


def test_each_connection_has_its_own_client_breaker_discovery_and_rate_limit() -> None:
    doc = as_bytes(kubeconfig({}, {}))
    a = ClusterConnection.open(doc, qps=5)
    b = ClusterConnection.open(doc, qps=5)
    with a, b:
        assert a.client is not b.client and a.client._conn.pool is not b.client._conn.pool
        assert a.breaker is not b.breaker and a.discovery is not b.discovery
        assert a.rate_limit is not None and b.rate_limit is not None and a.rate_limit is not b.rate_limit
        assert a.rate_limit.burst == 10
    assert os.environ.get("GITOPS_SYNC_NEVER_SET") is None


def test_connections_share_one_per_kubeconfig_and_close_it_with_its_last_user() -> None:
    opened: list[ClusterConnection] = []

    def open_counted(data: bytes, context: str | None, *, trusted: bool) -> ClusterConnection:
        conn = ClusterConnection.open(data, context, trusted=trusted)
        opened.append(conn)
        return conn

    pool = Connections(open_counted)
    old, rotated = as_bytes(kubeconfig({}, {})), as_bytes(kubeconfig({}, {"token": "rotated"}))
    a = pool.acquire(old)
    assert pool.acquire(old) is a and len(opened) == 1  # two GitSyncs naming one Secret: one connection
    b = pool.acquire(rotated)  # the Secret rotated: a connection of its own
    assert b is not a and len(pool) == 2
    with pytest.raises(UntrustedKubeconfigError):  # refused as by ClusterConnection.open, nothing kept
        pool.acquire(as_bytes(kubeconfig({}, {"tokenFile": "/etc/token"})))
    assert len(pool) == 2
    pool.release(a)
    assert len(pool) == 2  # one user left: still open
    closed: list[ClusterConnection] = []
    a.close = lambda: closed.append(a)  # type: ignore[method-assign]
    pool.release(a)
    pool.release(a)  # released once too often: nothing happens
    assert closed == [a] and len(pool) == 1
