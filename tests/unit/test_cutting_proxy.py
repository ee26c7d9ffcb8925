"""The fault suite's TCP proxy (tests/reliability/proxy.py) itself: forwards bytes, resets every live
connection on command and counts it, refuses nothing else, and stops by itself after its lifetime."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.reliability.proxy import CuttingProxy


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(4096):
                    conn.sendall(data)
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield ("127.0.0.1", int(server.getsockname()[1]))
    stop.set()
    t.join(2)
    server.close()


def _dial(proxy: CuttingProxy) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    s.sendall(b"ping\n")
    assert s.recv(16) == b"ping\n"
    return s


def test_forwards_then_cuts_every_live_connection(echo: tuple[str, int]) -> None:
    with CuttingProxy(echo, lifetime=30) as proxy:
        clients = [_dial(proxy) for _ in range(3)]
        assert (proxy.accepted, proxy.live) == (3, 3)
        assert proxy.cut_all() == 3
        for c in clients:
            with pytest.raises(ConnectionResetError):  # an orderly close would read as b"" instead
                c.recv(16)
            c.close()
        assert (proxy.cut, proxy.live) == (3, 0)
        _dial(proxy).close()  # new connections still pass after a cut
        assert proxy.accepted == 4


def test_stops_by_itself_after_its_lifetime(echo: tuple[str, int]) -> None:
    proxy = CuttingProxy(echo, lifetime=0.5).start()
    try:
        c = _dial(proxy)
        deadline = time.monotonic() + 5
        while proxy.live and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.live == 0 and proxy.cut == 1
        c.close()
        with pytest.raises(OSError):
            _dial(proxy)
    finally:
        proxy.stop()
