"""The client's circuit breaker: a hung or refusing API server costs one timeout, not one per request.

The Breaker itself is tested with a fake probe and clock; the Client against real local sockets (one that
accepts connections and never answers, like a SIGSTOPped kube-apiserver, and a closed port).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitops_sync.cluster.client import Breaker, Client
from gitops_sync.errors import ApiTimeoutError, ApiUnavailableError
from tests.unit.fakes import FakeClock, loopback_kubeconfig


def test_a_failed_probe_opens_the_breaker_and_requests_fail_fast() -> None:
    probes: list[int] = []
    clock = FakeClock()
    b = Breaker(lambda: probes.append(1) or "no answer within 3s", retry_after=2.0, clock=clock)
    b.check()  # closed: nothing happens
    b.failed("no answer to PATCH within 30s")
    assert b.is_down and b.trips == 1 and len(probes) == 1
    assert "no answer to PATCH" in b.reason and "health probe: no answer within 3s" in b.reason
    for _ in range(100):  # inside retry_after: no probe, immediate refusal
        with pytest.raises(ApiUnavailableError, match="health probe"):
            b.check()
    assert len(probes) == 1
    b.failed("another timeout")  # already open: no second probe
    assert len(probes) == 1


def test_half_open_reprobe_closes_the_breaker_when_the_server_is_back() -> None:
    answers = ["refused", "refused", None]
    clock = FakeClock()
    b = Breaker(lambda: answers.pop(0), retry_after=2.0, clock=clock)
    b.failed("connection refused")
    assert b.is_down
    clock.advance(2.5)
    with pytest.raises(ApiUnavailableError):
        b.check()  # re-probed, still down
    assert len(answers) == 1
    clock.advance(1.0)
    with pytest.raises(ApiUnavailableError):
        b.check()  # too soon for another probe
    assert len(answers) == 1
    clock.advance(1.5)
    b.check()  # re-probed, answered: closed, the request may go
    assert not b.is_down and b.reason == "" and not answers


def test_requests_during_the_first_probe_wait_for_its_verdict() -> None:
    """Otherwise the other in-flight workers send their next request into the hung server (30 s more each)."""
    started = threading.Event()

    def slow_probe() -> str | None:
        started.set()
        time.sleep(0.3)
        return "no answer within 3s"

    b = Breaker(slow_probe)
    t = threading.Thread(target=b.failed, args=("timeout",))
    t.start()
    started.wait(5)
    t0 = time.monotonic()
    with pytest.raises(ApiUnavailableError):
        b.check()
    assert 0.1 < time.monotonic() - t0 < 2
    t.join()


def test_a_successful_probe_keeps_the_breaker_closed() -> None:
    b = Breaker(lambda: None)
    b.failed("one slow request")
    assert not b.is_down and b.trips == 0
    b.check()


def test_a_probe_that_raises_counts_as_down() -> None:
    def probe() -> str | None:
        raise RuntimeError("boom")

    b = Breaker(probe)
    b.failed("timeout")
    assert b.is_down and "boom" in b.reason


# -- the Client against real sockets ----------------------------------------------------------------


@pytest.fixture
def hung_server() -> Iterator[int]:
    """A TCP port that accepts connections and never says a word (a frozen API server)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                held.append(conn)
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield int(srv.getsockname()[1])
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


def test_a_hung_server_costs_one_request_timeout_then_everything_fails_fast(tmp_path: Path, hung_server: int) -> None:
    with Client(loopback_kubeconfig(tmp_path, hung_server), timeout=0.5, probe_timeout=0.3) as client:
        t0 = time.monotonic()
        with pytest.raises(ApiTimeoutError, match="no answer to PATCH"):
            client.request("PATCH", "/api/v1/namespaces/default/configmaps/a", body={})
        first = time.monotonic() - t0
        assert client.breaker.is_down and "health probe: no answer within 0.3s" in client.breaker.reason
        t1 = time.monotonic()
        for i in range(300):
            with pytest.raises(ApiUnavailableError):
                client.request("GET", f"/api/v1/namespaces/default/configmaps/c{i}")
        rest = time.monotonic() - t1
        sent = client.stats.reads + client.stats.writes
    assert 0.5 <= first < 2.0, first  # the request timeout plus one probe
    assert rest < 0.5, rest  # 300 requests refused without a byte sent
    assert sent == 1, sent


def test_a_refused_connection_is_not_sent_and_opens_the_breaker(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])  # closed again: connections are refused
    with Client(loopback_kubeconfig(tmp_path, port), timeout=5, probe_timeout=0.3) as client:
        t0 = time.monotonic()
        with pytest.raises(ApiUnavailableError, match="unreachable"):
            client.request("GET", "/api/v1/namespaces")
        with pytest.raises(ApiUnavailableError, match="health probe"):
            client.request("GET", "/api/v1/namespaces")
        assert time.monotonic() - t0 < 1.0
        assert client.breaker.is_down


def test_the_deadline_stops_requests_before_they_are_sent(tmp_path: Path, hung_server: int) -> None:
    with Client(loopback_kubeconfig(tmp_path, hung_server), timeout=30, probe_timeout=0.3) as client:
        client.set_deadline(1.0, started=time.monotonic() - 0.6)
        t0 = time.monotonic()
        with pytest.raises(ApiTimeoutError):  # cut at the deadline, not after 30 s
            client.request("GET", "/api/v1/namespaces")
        assert time.monotonic() - t0 < 1.5
        client.breaker.down_since = None  # only the deadline matters below
        with pytest.raises(ApiUnavailableError, match="deadline of 1s passed"):
            client.request("GET", "/api/v1/namespaces")
