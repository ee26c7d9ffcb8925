"""The daemon's HTTP server under bad clients: each gets a 4xx or a timeout, never a 500, a leak or a crash.

The server runs in a process of its own (http_target.py: the real HttpServer with stand-in endpoints) so
its threads and file descriptors are counted exactly in /proc/PID, apart from this test's sockets.
Loopback only; every loop is bounded.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager, suppress
from pathlib import Path

import pytest

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.runtime.auth import KubernetesAuth
from tests.reliability.conftest import Recorder
from tests.reliability.http_target import SECRET

REPO = Path(__file__).resolve().parents[2]
# Probe latencies, cut-off deadlines and thread counts under floods of the test's own: with no other test
# beside them under pytest-xdist (tests/reliability/alone.py), as these figures are on a quiet machine.
pytestmark = pytest.mark.alone


class Target:
    """The server process: its port, thread and fd counts, and its log."""

    def __init__(self, limits: dict[str, int], log: Path) -> None:
        self.log = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.http_target", json.dumps(limits)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        status, _ = request(self.port, "GET", "/healthz")
        assert status == 200

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/task"))

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def settled_fds(self, at_most: int | None = None, timeout: float = 6.0) -> int:
        """The fd count once it stops changing (and is at most `at_most`): closing is asynchronous."""
        deadline = time.monotonic() + timeout
        last = self.fds()
        while time.monotonic() < deadline:
            time.sleep(0.3)
            now = self.fds()
            if now == last and (at_most is None or now <= at_most):
                return now
            last = now
        return last

    def rss(self) -> int:
        """Resident memory in bytes (VmRSS)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(15)
        self._log.close()
        return self.log.read_text(errors="replace")


@contextmanager
def running(tmp_path: Path, idle_timeout: float = 2) -> Iterator[Target]:
    t = Target({"idle_timeout": idle_timeout, "request_timeout": 2, "threads": 4}, tmp_path / "server.log")
    try:
        yield t
    finally:
        if t.alive():
            log = t.close()
            assert "Traceback" not in log, log


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Target]:
    with running(tmp_path) as t:
        yield t


def exchange(port: int, data: bytes, timeout: float = 5.0) -> tuple[int | None, bytes, float]:
    """Send raw bytes; read one response (or until the server closes). (status or None, head, seconds)."""
    t0 = time.monotonic()
    with closing(socket.create_connection(("127.0.0.1", port), timeout=timeout)) as s:
        with suppress(OSError):  # the server may close before it read everything (431): its answer counts
            s.sendall(data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                return None, buf, time.monotonic() - t0
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    elapsed = time.monotonic() - t0
    if not buf.startswith(b"HTTP/"):
        return None, buf, elapsed
    return int(buf.split(b" ", 2)[1]), buf.split(b"\r\n\r\n", 1)[0], elapsed


def request(
    port: int, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
) -> tuple[int | None, float]:
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    status, _, elapsed = exchange(port, head.encode() + b"\r\n" + body)
    return status, elapsed


def connections(stack: ExitStack, port: int, n: int) -> list[socket.socket]:
    """`n` open connections to the server, closed when `stack` ends."""
    return [stack.enter_context(closing(socket.create_connection(("127.0.0.1", port), timeout=5))) for _ in range(n)]


def post(extra: bytes, body: bytes = b"") -> bytes:
    return b"POST /hooks/git HTTP/1.1\r\nHost: t\r\n" + extra + b"\r\n" + body


def test_bad_content_length_and_oversized_bodies_get_a_4xx(target: Target, reliability: Recorder) -> None:
    threads = target.threads()
    cases = {
        "Content-Length: -1": (post(b"Content-Length: -1\r\n", b"{}"), 400),
        "Content-Length: 1e3": (post(b"Content-Length: 1e3\r\n", b"{}"), 400),
        "two different Content-Length headers": (post(b"Content-Length: 2\r\nContent-Length: 3\r\n", b"{}"), 400),
        "POST with a body and no Content-Length": (post(b"", b'{"a": 1}'), 411),
        "declared body of 5 MiB + 1 (not sent)": (post(f"Content-Length: {5 * 1024 * 1024 + 1}\r\n".encode()), 413),
        "chunked body of 6 MiB": (
            post(b"Transfer-Encoding: chunked\r\n", b"600000\r\n" + b"a" * 0x600000 + b"\r\n0\r\n\r\n"),
            413,
        ),
    }
    seen = {}
    for name, (data, want) in cases.items():
        status, _, elapsed = exchange(target.port, data)
        seen[name] = (status, round(elapsed, 2))
        assert status == want, (name, status)
    assert request(target.port, "GET", "/healthz")[0] == 200
    assert target.threads() == threads and target.alive()
    reliability.record(
        area="HTTP",
        fault="negative, non-numeric, duplicate or missing Content-Length; body over the 5 MiB cap "
        "(declared and chunked)",
        outcome="; ".join(f"{k}: {v[0]}" for k, v in seen.items()),
        checked="each a 4xx (never 500), probes still 200, worker threads unchanged",
        figures=f"slowest answer {max(v[1] for v in seen.values()):.2f} s; threads {threads} before and after",
    )


def test_non_ascii_signature_headers_are_a_mismatch_not_an_error(target: Target, reliability: Recorder) -> None:
    body = b'{"ref": "refs/heads/main"}'
    good = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    length = f"Content-Length: {len(body)}\r\n".encode()
    cases = {
        "X-Hub-Signature-256: sha256=\\xff\\xfe\\xe9 (latin-1 bytes)": b"X-Hub-Signature-256: sha256=\xff\xfe\xe9\r\n",
        "X-Hub-Signature-256: sha256=<hex>é (UTF-8)": b"X-Hub-Signature-256: " + good.encode() + "é\r\n".encode(),
        "X-Gitlab-Token: é (UTF-8)": "X-Gitlab-Token: é\r\n".encode(),
        "X-Gitlab-Token: \\x00\\xff": b"X-Gitlab-Token: \xff\xfe\r\n",
    }
    got = {}
    for name, header in cases.items():
        status, _, _ = exchange(target.port, post(length + header, body))
        got[name] = status
        assert status == 401, (name, status)
    ok, _, _ = exchange(target.port, post(length + f"X-Hub-Signature-256: {good}\r\n".encode(), body))
    assert ok == 202  # the real signature still verifies
    reliability.record(
        area="HTTP",
        fault="non-ASCII webhook signature and token headers (latin-1 and UTF-8 bytes)",
        outcome=f"{len(cases)} requests: 401 signature/token mismatch each; a correct signature afterwards: 202",
        checked="never 500 (compare_digest used to raise TypeError on non-ASCII str), server alive",
    )


GARBAGE = {
    "binary junk": b"\x00\x01\x02\xff\r\n\r\n",
    "method only": b"GET\r\n\r\n",
    "header line without a colon": b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n",
    "request line of 100 kB": b"GET /" + b"A" * 100_000 + b" HTTP/1.1\r\n\r\n",
    "a header of 70 kB (cap 64 KiB)": b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
    "unknown method": b"BREW /status HTTP/1.1\r\nHost: t\r\n\r\n",
    "POST to a probe": b"POST /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    "percent-encoded junk path": b"GET /%ff%00%2e%2e/status HTTP/1.1\r\nHost: t\r\n\r\n",
    "HTTP/9.9": b"GET /nope HTTP/9.9\r\nHost: t\r\n\r\n",
    "chunked with a bad chunk size": b"POST /hooks/git HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"zz\r\n{}\r\n0\r\n\r\n",
}


def test_garbage_request_lines_get_a_4xx(target: Target, reliability: Recorder) -> None:
    threads = target.threads()
    got: dict[str, int | None] = {}
    for name, data in GARBAGE.items():
        status, _, _ = exchange(target.port, data)
        got[name] = status
        assert status is not None and 400 <= status < 500, (name, status)
    # An unknown transfer coding is 501 by RFC 9112 6.1: a 5xx, but the client's fault is named, not a crash.
    status, _, _ = exchange(target.port, b"GET /healthz HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n")
    assert status == 501
    # Blank lines only: no request at all, so no answer; the connection is closed by the request deadline.
    status, raw, elapsed = exchange(target.port, b"\r\n\r\n\r\n", timeout=10)
    assert status is None and raw == b"" and 1.0 <= elapsed < 6.0, (status, raw, elapsed)
    assert request(target.port, "GET", "/healthz")[0] == 200
    assert target.threads() == threads and target.alive()
    reliability.record(
        area="HTTP",
        fault=f"{len(GARBAGE)} malformed requests (" + ", ".join(GARBAGE) + ")",
        outcome=", ".join(f"{k}: {v}" for k, v in got.items()) + "; Transfer-Encoding: gzip: 501 (RFC 9112); "
        f"blank lines only: closed after {elapsed:.1f} s",
        checked="each a 4xx or a timeout (never 500), server alive, worker threads unchanged",
    )


def _closed_by_server(s: socket.socket, wait: float) -> bool:
    """True once the server has closed `s` (any answer bytes still in flight are read and dropped)."""
    deadline = time.monotonic() + wait
    while True:
        readable, _, _ = select.select([s], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            return False
        try:
            if s.recv(65536) == b"":
                return True
        except OSError:
            return True


def test_slowloris_trickled_headers_are_cut_at_the_request_deadline(target: Target, reliability: Recorder) -> None:
    threads, fds = target.threads(), target.settled_fds()
    n = 50
    with ExitStack() as stack:
        socks = connections(stack, target.port, n)
        for s in socks:
            s.sendall(b"GET /status HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        t0 = time.monotonic()
        open_socks = list(socks)
        probe_worst = 0.0
        for _ in range(40):  # a byte every 0.25 s, at most 10 s
            for s in list(open_socks):
                try:
                    s.sendall(b"a")
                except OSError:
                    open_socks.remove(s)
                    continue
                if _closed_by_server(s, 0):
                    open_socks.remove(s)
            status, took = request(target.port, "GET", "/healthz")
            assert status == 200
            probe_worst = max(probe_worst, took)
            assert target.threads() == threads
            if not open_socks:
                break
            time.sleep(0.25)
        cut_after = time.monotonic() - t0
        assert not open_socks, f"{len(open_socks)} trickling connections still open after {cut_after:.1f} s"
    assert 1.5 <= cut_after < 5.0  # deadline 2 s, checked every second
    assert target.settled_fds(fds) == fds and target.threads() == threads
    reliability.record(
        area="HTTP",
        fault=f"slowloris: {n} connections trickling one header byte every 0.25 s",
        outcome=f"all closed by the 2 s request deadline after {cut_after:.1f} s; /healthz answered meanwhile",
        checked="no worker thread held (count constant), fds back to baseline",
        figures=f"worst /healthz during the attack {probe_worst * 1000:.0f} ms; threads {threads}; fds {fds}",
    )


def test_a_trickled_body_and_a_client_that_never_reads_hold_no_worker(target: Target, reliability: Recorder) -> None:
    threads, fds = target.threads(), target.settled_fds()
    with ExitStack() as stack:
        slow_body, deaf = connections(stack, target.port, 2)
        slow_body.sendall(post(b"Content-Length: 1000\r\nX-Gitlab-Token: s3cret\r\n", b"{"))
        deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        deaf.sendall(b"GET /status?history=all HTTP/1.1\r\nHost: t\r\n\r\n")  # ~8 MB it never reads
        t0 = time.monotonic()
        cut = False
        for _ in range(40):  # a body byte every 0.25 s, at most 10 s
            with suppress(OSError):
                slow_body.sendall(b" ")
            status, took = request(target.port, "GET", "/status")  # the workers are free for others
            assert status == 200 and took < 2.0, (status, took)  # (the first may share the CPU with encoding the 8 MB)
            assert target.threads() == threads
            cut = _closed_by_server(slow_body, 0)
            if cut:
                break
            time.sleep(0.25)
        body_cut = time.monotonic() - t0
        assert cut and 1.5 <= body_cut < 5.0, body_cut
        # the deaf client still holds its socket, unread: the server's side must be closed regardless
        server_closed = target.settled_fds(fds, timeout=8.0) == fds
        deaf_cut = time.monotonic() - t0
        assert server_closed, target.fds()
    assert target.settled_fds(fds) == fds and target.threads() == threads
    reliability.record(
        area="HTTP",
        fault="a webhook body trickled a byte every 0.25 s; a client that asks for 8 MB of /status and never reads",
        outcome=f"the slow body cut by the 2 s request deadline after {body_cut:.1f} s; the deaf client's answer "
        f"buffered by the event loop and its connection closed by the server {deaf_cut:.1f} s after the request; "
        "/status for others answered 200 throughout",
        checked="no worker held by either (threads constant), fds back to baseline",
        figures=f"threads {threads}; fds {fds}",
    )


# Opening 300 connections and answering 150 requests took over 2 s on a busy 2-core machine: with the fixture's
# 2 s idle timeout the first ones were closed before the last were open, and "all held at once" never held.
IDLE_MANY = 6.0


def test_hundreds_of_idle_connections_hold_no_thread_and_are_closed(tmp_path: Path, reliability: Recorder) -> None:
    with running(tmp_path, IDLE_MANY) as target:
        _hundreds_of_idle_connections(target, reliability)


def _hundreds_of_idle_connections(target: Target, reliability: Recorder) -> None:
    threads, fds = target.threads(), target.settled_fds()
    n = 300
    with ExitStack() as stack:
        socks = connections(stack, target.port, n)
        # half of them silent from the start, half idle after one keep-alive request
        for s in socks[n // 2 :]:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        deadline = time.monotonic() + 3
        while target.fds() < fds + n and time.monotonic() < deadline:
            time.sleep(0.05)
        peak_fds, peak_threads = target.fds(), target.threads()
        assert peak_fds >= fds + n and peak_threads == threads
        status, took = request(target.port, "GET", "/healthz")
        assert status == 200 and took < 1.0
        t0 = time.monotonic()
        closed = [_closed_by_server(s, IDLE_MANY + 4) for s in socks]
        closed_after = time.monotonic() - t0
        assert all(closed), f"{closed.count(False)} idle connections not closed by the server"
    assert (target.settled_fds(fds), target.threads()) == (fds, threads)
    reliability.record(
        area="HTTP",
        fault=f"{n} idle connections (half silent, half after a keep-alive request)",
        outcome=f"/healthz answered in {took * 1000:.0f} ms with all open; every one closed by the "
        f"{IDLE_MANY:.0f} s idle timeout within {closed_after:.1f} s",
        checked="threads constant, fds back to baseline",
        figures=f"server fds {fds} -> {peak_fds} -> {target.fds()}; threads {threads} -> {peak_threads} -> "
        f"{target.threads()}",
    )


def test_connections_over_the_cap_are_answered_or_make_room(tmp_path: Path, reliability: Recorder) -> None:
    """200 clients that each send a request at once, against a cap of 50: all answered (the rest wait in
    the listen backlog). 200 silent connections: the server holds at most the cap and closes the oldest
    silent ones (after 1 s each) to take the newer ones; a probe meanwhile is answered at once."""
    t = Target({"idle_timeout": 20, "request_timeout": 20, "threads": 4, "connections": 50}, tmp_path / "s.log")
    try:
        fds = t.settled_fds()
        n = 200
        with ExitStack() as stack:
            socks = connections(stack, t.port, n)
            for s in socks:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            answered = 0
            t0 = time.monotonic()
            for s in socks:  # each is accepted once an earlier one is done
                if s.recv(4096).startswith(b"HTTP/1.1 200"):
                    answered += 1
            took = time.monotonic() - t0
        assert answered == n
        assert t.settled_fds(fds) == fds
        with ExitStack() as stack:
            silent = connections(stack, t.port, n)
            time.sleep(2.0)  # the newest wait in the backlog until the oldest are 0.25 s old
            held = t.fds() - fds
            assert held <= 50, held  # the map counts the listener and the wake-up pipe too
            status, probe = request(t.port, "GET", "/healthz")
            assert status == 200 and probe < 1.0, (status, probe)
            closed = [i for i, s in enumerate(silent) if _closed_by_server(s, 0.05)]
            assert n - 50 <= len(closed) < n, len(closed)
            kept = sorted(set(range(n)) - set(closed))
            assert max(closed[: len(closed) - 5]) < min(kept), (closed, kept)  # oldest first (a few at the edge)
        assert t.settled_fds(fds) == fds
    finally:
        log = t.close()
    assert "Traceback" not in log
    reliability.record(
        area="HTTP",
        fault=f"{n} connections against a cap of 50: first each sending its request at once, then {n} silent",
        outcome=f"all {n} requests answered 200 within {took:.1f} s (the rest waited in the listen backlog); of the "
        f"silent ones the server closed {len(closed)}, oldest first, to take newer ones, and a probe meanwhile "
        f"took {probe * 1000:.0f} ms",
        checked="server fds never above the cap, back to baseline after",
        figures=f"peak extra fds {held}",
    )


def test_probes_stay_fast_while_status_requests_flood_the_workers(target: Target, reliability: Recorder) -> None:
    """4 workers, 2 of them reserved for probes: /status beyond 2 at once is 503 Retry-After, never a queue
    the kubelet's probe (1 s timeout) has to wait behind."""
    threads = target.threads()
    n = 100
    codes: list[int | None] = []
    probes: list[tuple[int | None, float]] = []
    lock = threading.Lock()

    def one() -> None:
        status, _ = request(target.port, "GET", "/status")
        with lock:
            codes.append(status)

    t0 = time.monotonic()
    clients = [threading.Thread(target=one) for _ in range(n)]
    for c in clients:
        c.start()
    while any(c.is_alive() for c in clients) and time.monotonic() - t0 < 30:
        probes.append(request(target.port, "GET", "/readyz"))
        assert target.threads() == threads
    for c in clients:
        c.join(30)
    took = time.monotonic() - t0
    served, busy = codes.count(200), codes.count(503)
    assert served + busy == n and served >= 2, codes
    assert probes and all(code == 200 for code, _ in probes)
    worst = max(t for _, t in probes)
    assert worst < 0.5
    assert target.threads() == threads
    reliability.record(
        area="HTTP",
        fault=f"{n} concurrent GET /status (50 ms each) against 4 workers, 2 reserved for probes",
        outcome=f"{served} answered 200, {busy} answered 503 Retry-After at once; {len(probes)} /readyz probes "
        f"meanwhile all 200, worst {worst * 1000:.0f} ms; done in {took:.1f} s",
        checked="server threads never above the cap; probes never queued behind /status",
        figures=f"threads {threads} throughout",
    )


# -- authentication when the API server cannot answer ------------------------------------------------


def _kubeconfig(server: str, path: Path) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "daemon-token"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path


def test_auth_answers_503_when_the_api_server_is_away_or_hung(reliability: Recorder) -> None:
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as hung, socket.socket() as gone:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)  # accepts (the kernel does) and never answers: a frozen API server
        gone.bind(("127.0.0.1", 0))  # bound, never listening: connection refused
        figures = []
        for name, sock in (("refused", gone), ("hung", hung)):
            port = sock.getsockname()[1]
            # the client's breaker probes the server once after a failure (probe_timeout), then fails fast
            client = Client(
                _kubeconfig(f"https://127.0.0.1:{port}", Path(tmp) / f"{name}.kubeconfig"), probe_timeout=1.0
            )
            auth = KubernetesAuth(client, timeout=1.0)
            t0 = time.monotonic()
            decision = auth.check("/metrics", "Bearer some-token")
            took = time.monotonic() - t0
            assert decision.status == 503, decision
            assert "some-token" not in decision.reason
            assert took < 1.0 + 1.0 + 1.5  # review timeout + one probe, with room for a loaded machine
            # not cached as an answer: the next request asks again, and while the server stays away the
            # breaker makes that 503 at once (never a stale 200 or 401)
            t0 = time.monotonic()
            again = auth.check("/metrics", "Bearer some-token")
            took_again = time.monotonic() - t0
            assert again.status == 503 and took_again < 0.5, (again, took_again)
            figures.append(f"{name}: first 503 in {took:.2f} s, the next in {took_again * 1000:.0f} ms")
            client.close()
    reliability.record(
        area="HTTP",
        fault="--http-auth kubernetes with the API server refusing connections, and hung (accepts, never answers)",
        outcome="/metrics and /status answer 503 with Retry-After (never 200); the first after at most the review "
        "timeout plus one health probe (5 s + 3 s in the daemon; 1 s + 1 s here), then at once while it stays away",
        checked="errors are not cached; the token is not in the answer",
        figures="; ".join(figures),
    )


def _keepalive_gets(port: int, paths: list[str]) -> dict[int, int]:
    """GET each path on one keep-alive connection (reconnecting if the server closes it): status -> count."""
    codes: dict[int, int] = {}
    sock: socket.socket | None = None
    try:
        for path in paths:
            for _ in range(2):  # one reconnect per request at most
                if sock is None:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                try:
                    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
                    head = b""
                    while b"\r\n\r\n" not in head:
                        chunk = sock.recv(65536)
                        if not chunk:
                            raise ConnectionResetError
                        head += chunk
                except OSError:
                    sock.close()
                    sock = None
                    continue
                top, _, rest = head.partition(b"\r\n\r\n")
                length = next(
                    int(v)
                    for k, _, v in (h.partition(b":") for h in top.split(b"\r\n"))
                    if k.lower() == b"content-length"
                )
                while len(rest) < length:
                    rest += sock.recv(65536)
                status = int(top.split(b" ", 2)[1])
                codes[status] = codes.get(status, 0) + 1
                break
            else:
                raise AssertionError(f"no answer to GET {path[:40]}...")
    finally:
        if sock is not None:
            sock.close()
    return codes


def test_distinct_unknown_static_names_do_not_grow_the_server(target: Target, reliability: Recorder) -> None:
    """/static/ is served without authentication; it kept every name asked for in an unbounded cache."""
    n, size = 3000, 60_000
    # the allocator's and the parser's high-water mark for requests of this size (~16 MiB), before measuring
    _keepalive_gets(target.port, [f"/static/warm-{i:04d}-" + "x" * (size - 16) for i in range(500)])
    before = target.rss()
    t0 = time.monotonic()
    codes = _keepalive_gets(target.port, [f"/static/{i:05d}-" + "x" * (size - 13) for i in range(n)])
    took = time.monotonic() - t0
    grew = target.rss() - before
    assert codes == {404: n}, codes
    assert _keepalive_gets(target.port, ["/static/app.css", "/static/app.js"]) == {200: 2}
    assert grew < 8 * 1024 * 1024, f"RSS grew by {grew / 2**20:.1f} MiB"
    assert request(target.port, "GET", "/healthz")[0] == 200 and target.alive()
    reliability.record(
        area="HTTP",
        fault=f"{n} GET /static/<name> with distinct unknown names of {size // 1000} kB each "
        f"({n * size / 1e6:.0f} MB of names), no authentication",
        outcome=f"each 404 in {took:.1f} s; the page's 3 files still 200",
        checked="no name is cached: the server's RSS stays flat (before: one cache entry per name, for good)",
        figures=f"RSS {before / 2**20:.1f} MiB -> {(before + grew) / 2**20:.1f} MiB ({grew / 2**20:+.1f} MiB)",
    )


class Slowloris:
    """`n` connections each trickling one header byte a second; one the server closes is opened again."""

    def __init__(self, port: int, n: int) -> None:
        self.port = port
        self.socks = [self._open() for _ in range(n)]
        self.reopened = 0

    def _open(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.setblocking(False)
        s.send(b"GET /status HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        return s

    def tick(self) -> None:
        """One byte on each connection; reopen those the server closed."""
        for i, s in enumerate(self.socks):
            try:
                if select.select([s], [], [], 0)[0] and s.recv(4096) == b"":
                    raise ConnectionResetError
                s.send(b"a")
            except OSError:
                s.close()
                self.socks[i] = self._open()
                self.reopened += 1

    def close(self) -> None:
        for s in self.socks:
            s.close()


def test_probes_answer_within_1s_while_600_slowloris_connections_fill_the_cap(
    tmp_path: Path, reliability: Recorder
) -> None:
    """The daemon's own limits (500 connections, 10 s request deadline): 600 connections trickling a byte a
    second used to hold every slot, so the kubelet's /healthz waited in the listen backlog for seconds."""
    t = Target({}, tmp_path / "server.log")
    n, seconds = 600, 15.0
    probes: list[float] = []
    failures: list[str] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            status, took = request(t.port, "GET", "/healthz")
            probes.append(took)
            if status != 200:
                failures.append(f"status {status} after {took:.2f} s")
            stop.wait(0.25)

    try:
        threads, limit = t.threads(), 500
        attack = Slowloris(t.port, n)
        prober = threading.Thread(target=probe)
        t0 = time.monotonic()
        prober.start()
        peak_fds = 0
        try:
            while time.monotonic() - t0 < seconds:
                attack.tick()
                peak_fds = max(peak_fds, t.fds())
                assert t.threads() == threads
                time.sleep(1.0)
        finally:
            stop.set()
            prober.join(30)
            attack.close()
        worst = max(probes)
        slow = [p for p in probes if p >= 1.0]
        assert not failures, failures
        assert not slow, f"{len(slow)} of {len(probes)} /healthz took 1 s or more (worst {worst:.2f} s)"
        assert peak_fds <= limit + 20, peak_fds  # the cap still holds (listener, pipes, stdio on top)
    finally:
        log = t.close()
    assert "Traceback" not in log
    probes.sort()
    reliability.record(
        area="HTTP",
        fault=f"slowloris over the cap: {n} connections trickling one header byte a second for {seconds:.0f} s "
        f"against the default 500-connection cap (each one the server closed opened again: {attack.reopened})",
        outcome=f"{len(probes)} /healthz probes meanwhile, every one 200 within 1 s: at the cap the server closes "
        "the connection that has gone longest without a complete request to take the new one",
        checked="probes never wait behind the attack (the kubelet's 1 s timeout); connections never above the "
        "cap; worker threads constant",
        figures=f"/healthz median {probes[len(probes) // 2] * 1000:.0f} ms, worst {worst * 1000:.0f} ms; "
        f"server fds at most {peak_fds}",
    )
