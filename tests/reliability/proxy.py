"""A fault-injecting loopback TCP forwarder: the daemon talks to the API server through it, and a test
cuts every live connection (watches included) on command, as a load balancer or a NAT timeout would.

Bytes pass through untouched (TLS stays end to end, so the API server's certificate must name the
address the client dials: 127.0.0.1). Bounded: at most `max_connections` at once, and it stops by
itself after `lifetime` seconds even if a test forgets to. Counts accepted and cut connections for the
test's assertions and RELIABILITY.md.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from types import TracebackType


class CuttingProxy:
    def __init__(self, target: tuple[str, int], *, lifetime: float = 600.0, max_connections: int = 256) -> None:
        self.target = target
        self.lifetime = lifetime
        self.max_connections = max_connections
        self.accepted = 0
        self.cut = 0
        self._lock = threading.Lock()
        self._live: set[socket.socket] = set()
        self._cut: set[socket.socket] = set()  # reset by cut_all: their pumps must not close them orderly
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self._thread = threading.Thread(target=self._accept, name="cutting-proxy", daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def live(self) -> int:
        with self._lock:
            return len(self._live) // 2

    def start(self) -> CuttingProxy:
        self._thread.start()
        return self

    def cut_all(self) -> int:
        """Reset every live connection (RST, no orderly close); returns how many client connections."""
        with self._lock:  # count in the same step that empties `live`, so a reader never sees one without the other
            socks = list(self._live)
            self._live.clear()
            self._cut.update(socks)
            self.cut += len(socks) // 2
        for s in socks:  # every socket gets SO_LINGER 0 before any is closed (a closing one wakes its pumps)
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for s in socks:
            _reset(s)
        return len(socks) // 2

    def stop(self) -> None:
        self._stop.set()
        self.cut_all()
        self._thread.join(5)
        with contextlib.suppress(OSError):
            self._listener.close()

    def __enter__(self) -> CuttingProxy:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- internals --------------------------------------------------------------------------

    def _accept(self) -> None:
        deadline = time.monotonic() + self.lifetime
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            if self.live >= self.max_connections:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._live.update((client, upstream))
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), name="cutting-proxy-pump", daemon=True).start()
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut_all()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._live.discard(src)
            self._live.discard(dst)
            cut = src in self._cut or dst in self._cut
        if cut:
            return  # cut_all resets both ends; an orderly shutdown here would send a FIN first
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()


def _reset(s: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer sees a connection reset, as when a middlebox drops the flow."""
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RD)  # wakes the pump blocked in recv() without sending a FIN
    with contextlib.suppress(OSError):
        s.close()
