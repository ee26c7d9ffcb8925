"""The write fence asked again at the socket (cluster/wire.py), against a real local HTTP server.

The server records every byte it gets, so "nothing was sent" is what the far end saw, not what the client
believes. A fence that closes between the early check and the send stands for a process frozen there
(the real SIGSTOP on the real API server: tests/reliability/test_leader_fence.py).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import urllib3

from gitops_sync.cluster import wire
from gitops_sync.cluster.client import Client
from gitops_sync.errors import ApiUnavailableError, FencedError
from tests.unit.fakes import loopback_kubeconfig


@dataclass
class Received:
    """What one connection delivered: complete requests (request lines) and whether it ended mid-request."""

    requests: list[str] = field(default_factory=list)
    bodies: list[int] = field(default_factory=list)  # the length of each complete request's body
    partial: bytes = b""
    ended: threading.Event = field(default_factory=threading.Event)  # the client closed it


ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class RecordingServer:
    """HTTP/1.1 on a loopback port: answers `{}` to each complete request (after `gate`, when set)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = int(self.sock.getsockname()[1])
        self.connections: list[Received] = []
        self.gate: threading.Event | None = None
        self.answers: list[bytes] = []  # answered in order before ANSWER (e.g. a 429 first)
        self.slow = 0.0  # seconds to wait before each read of at most 16 KiB (a server slower than the client)
        self.on_request: Callable[[int], None] = lambda n: None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)

    @property
    def requests(self) -> list[str]:
        with self._lock:
            return [r for c in self.connections for r in c.requests]

    def connection(self, index: int, timeout: float = 5) -> Received:
        """The index-th connection accepted, once it is (fails after `timeout`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.connections) > index:
                    return self.connections[index]
            time.sleep(0.01)
        raise AssertionError(f"no connection #{index} within {timeout} s")

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            rec = Received()
            with self._lock:
                self.connections.append(rec)
                self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn, rec), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket, rec: Received) -> None:
        buf = b""
        with conn:
            while True:
                head, sep, rest = buf.partition(b"\r\n\r\n")
                if sep:
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    if len(rest) >= length:
                        with self._lock:
                            rec.requests.append(head.split(b"\r\n")[0].decode())
                            rec.bodies.append(length)
                            n = sum(len(c.requests) for c in self.connections)
                        buf = rest[length:]
                        self.on_request(n)
                        if self.gate is not None:
                            self.gate.wait(10)
                        with self._lock:
                            answer = self.answers.pop(0) if self.answers else ANSWER
                        conn.sendall(answer)
                        continue
                try:
                    if self.slow:
                        time.sleep(self.slow)
                    chunk = conn.recv(16384 if self.slow else 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    rec.partial = buf
                    rec.ended.set()
                    return
                buf += chunk

    def close(self) -> None:
        self._stop.set()
        if self.gate is not None:
            self.gate.set()
        self.sock.close()
        for c in self._conns:  # a pool urllib3 has not garbage-collected yet keeps its connections open
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(5)


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    srv = RecordingServer()
    yield srv
    srv.close()


def _client(tmp_path: Path, port: int, timeout: float = 5) -> Client:
    return Client(loopback_kubeconfig(tmp_path, port), timeout=timeout)


class Flips:
    """A fence open for its first `open_for` questions and closed from then on; counts the questions."""

    def __init__(self, open_for: int) -> None:
        self.open_for = open_for
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.asked <= self.open_for


PATH = "/api/v1/namespaces/default/configmaps/a"
BODY = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v" * 100}}


def test_an_open_fence_lets_the_write_through(tmp_path: Path, server: RecordingServer) -> None:
    fence = Flips(open_for=10**6)
    with _client(tmp_path, server.port) as client:
        assert client.request("PATCH", PATH, body=BODY, fence=fence) == {}
        assert client.stats.writes == 1
    assert server.requests == [f"PATCH {PATH} HTTP/1.1"]
    assert fence.asked == 3, "early, before the headers, before the body"


def test_a_fence_closed_after_the_early_check_sends_not_one_byte(tmp_path: Path, server: RecordingServer) -> None:
    """Admitted by the early check, then frozen (here: the fence closes) before the send: nothing leaves."""
    fence = Flips(open_for=1)
    with _client(tmp_path, server.port) as client:
        with pytest.raises(FencedError, match="checked again as the request was about to be sent") as err:
            client.request("PATCH", PATH, body=BODY, fence=fence)
        assert isinstance(err.value, ApiUnavailableError), "reported as not attempted: nothing was sent"
        assert client.stats.writes == 0
        assert client.request("GET", PATH, fence=fence) == {}, "reads are never fenced"
    assert server.requests == [f"GET {PATH} HTTP/1.1"]
    assert all(c.partial == b"" for c in server.connections), [c.partial for c in server.connections]


def test_a_fence_closed_between_headers_and_body_leaves_the_request_incomplete(
    tmp_path: Path, server: RecordingServer
) -> None:
    fence = Flips(open_for=2)
    with _client(tmp_path, server.port) as client, pytest.raises(FencedError):
        client.request("PATCH", PATH, body=BODY, fence=fence)
    assert server.requests == [], "no complete request arrived"
    conn = server.connection(0)
    assert len(server.connections) == 1
    assert conn.ended.wait(5), "the client closed the connection it had sent the headers on"
    assert conn.partial.startswith(f"PATCH {PATH} HTTP/1.1".encode()) and conn.partial.endswith(b"\r\n\r\n")


def test_a_closed_fence_refuses_before_anything_is_made(tmp_path: Path, server: RecordingServer) -> None:
    fence = Flips(open_for=0)
    with _client(tmp_path, server.port) as client, pytest.raises(FencedError, match="checked before"):
        client.request("DELETE", PATH, body={"propagationPolicy": "Background"}, fence=fence)
    assert fence.asked == 1 and server.connections == []


def test_a_dry_run_is_a_read(tmp_path: Path, server: RecordingServer) -> None:
    with _client(tmp_path, server.port) as client:
        client.request("PATCH", PATH, query={"dryRun": "All"}, body=BODY, fence=lambda: False)
        client.request("DELETE", PATH, body={"dryRun": ["All"]}, fence=lambda: False)
    assert len(server.requests) == 2


def test_writes_queued_in_the_apply_pool_when_the_fence_closes_never_leave(
    tmp_path: Path, server: RecordingServer
) -> None:
    """4 workers, 40 writes. The fence closes when the server holds 4 requests: every worker is then waiting
    for an answer (none between a check and a send), so exactly those 4 were sent and the 36 queued
    behind them, each admitted or not by its early check, send nothing."""
    closed = threading.Event()
    server.gate = threading.Event()

    def on_request(n: int) -> None:
        if n == 4:
            closed.set()
            server.gate.set()  # type: ignore[union-attr]

    server.on_request = on_request
    with _client(tmp_path, server.port) as client, ThreadPoolExecutor(4) as pool:

        def write(i: int) -> str:
            try:
                client.request("PATCH", f"{PATH}{i}", body=BODY, fence=lambda: not closed.is_set())
            except FencedError:
                return "fenced"
            return "sent"

        outcomes = list(pool.map(write, range(40)))
    assert outcomes.count("sent") == 4 and outcomes.count("fenced") == 36, outcomes
    assert len(server.requests) == 4
    assert all(c.partial == b"" for c in server.connections)


def test_install_fences_every_pool_class_once() -> None:
    for pm in (urllib3.PoolManager(), urllib3.ProxyManager("http://127.0.0.1:9")):
        wire.install(pm)
        classes = dict(pm.pool_classes_by_scheme)
        for cls in classes.values():
            assert getattr(cls.ConnectionCls, "_fenced", False), cls
        wire.install(pm)
        assert pm.pool_classes_by_scheme == classes, "installing twice does not stack a second check"


BIG = {**BODY, "data": {"k": "v" * 4_000_000}}
# ~250 slow reads of 16 KiB: 0.2 s alone, over 5 s with the CPUs busy (make test runs lint and unit tests at once)
BIG_TIMEOUT = 60.0


def _small_buffers(client: Client) -> Client:
    """Connections with a 16 KiB send buffer: a 4 MB body then takes many writes and many full sockets."""
    from urllib3.connection import HTTPConnection

    small = [(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)]
    client._conn.pool.connection_pool_kw["socket_options"] = HTTPConnection.default_socket_options + small
    return client


def test_a_body_larger_than_the_socket_buffer_arrives_whole_and_every_write_is_checked(
    tmp_path: Path, server: RecordingServer
) -> None:
    server.slow = 0.0005
    fence = Flips(open_for=10**6)
    with _small_buffers(_client(tmp_path, server.port, BIG_TIMEOUT)) as client:
        assert client.request("PATCH", PATH, body=BIG, fence=fence) == {}
    (conn,) = server.connections
    assert len(conn.bodies) == 1 and conn.bodies[0] > 4_000_000, conn.bodies
    assert fence.asked > 10, "a full socket is waited for before the next check, not after it"


def test_a_fence_closed_in_the_middle_of_a_large_body_cuts_it_there(tmp_path: Path, server: RecordingServer) -> None:
    server.slow = 0.0005
    fence = Flips(open_for=6)
    with _small_buffers(_client(tmp_path, server.port, BIG_TIMEOUT)) as client, pytest.raises(FencedError):
        client.request("PATCH", PATH, body=BIG, fence=fence)
    conn = server.connection(0)
    assert conn.ended.wait(10)
    assert server.requests == []
    assert 0 < len(conn.partial) < 4_000_000, len(conn.partial)


_STATUS_429 = b'{"kind":"Status","code":429,"message":"too many, try again"}'
THROTTLED = (
    b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 0\r\n"
    + f"Content-Length: {len(_STATUS_429)}\r\n\r\n".encode()
    + _STATUS_429
)


def test_a_throttled_write_is_fenced_again_at_the_socket_when_it_is_retried(
    tmp_path: Path, server: RecordingServer
) -> None:
    """A 429 with Retry-After waits and sends again: the Lease may be gone by then, so the retry's bytes
    pass the fence at the socket as the first attempt's did (and the before_write hook is asked again)."""
    server.answers = [THROTTLED]
    fence = Flips(open_for=3)  # early, headers, body of the first attempt; closed for the retry
    hooked: list[str] = []
    with Client(loopback_kubeconfig(tmp_path, server.port), timeout=5, sleep=lambda _: None) as client:
        client.before_write = lambda method, path: hooked.append(method)
        with pytest.raises(FencedError, match="checked again as the request was about to be sent"):
            client.request("PATCH", PATH, body=BODY, fence=fence)
        assert (client.stats.writes, client.stats.throttled) == (1, 1), "counted once, as a throttled request"
    assert hooked == ["PATCH", "PATCH"]
    assert fence.asked == 4
    assert server.requests == [f"PATCH {PATH} HTTP/1.1"], "the retry never arrived"
    assert all(c.partial == b"" for c in server.connections), [c.partial for c in server.connections]


def test_a_throttled_write_with_its_fence_open_goes_through_on_the_retry(
    tmp_path: Path, server: RecordingServer
) -> None:
    server.answers = [THROTTLED]
    fence = Flips(open_for=10**6)
    with Client(loopback_kubeconfig(tmp_path, server.port), timeout=5, sleep=lambda _: None) as client:
        assert client.request("PATCH", PATH, body=BODY, fence=fence) == {}
    assert server.requests == [f"PATCH {PATH} HTTP/1.1"] * 2
    assert fence.asked == 5, "early once, then headers and body of each attempt"
