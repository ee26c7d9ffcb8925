"""The last check before a write leaves: its fence, asked again in the HTTP connection right before each
block of the request's bytes is handed to the socket.

A fence checked once, before the body is encoded, a pooled connection is taken and the TLS record is
written, can be stale by the time the bytes leave: a process frozen in between (SIGSTOP, a stalled node,
a long pause of the interpreter) wakes with its request admitted and writes seconds after another replica
took its Lease over. So `Client.request_status` puts a write's `Fence` into a context variable for the
duration of the send, and every pool's connection classes (`install`, for the native and the official
kubeconfig loader alike) ask it in `send`: once for the request line and headers, and again for each
block of the body. A fence that closed by then raises FencedError: the connection is closed at once and
nothing more of the request is sent; an API server that got the headers of a request whose body never
came executes nothing.

What is left is the time between the last check returning and the write syscall: a few Python frames of
http.client and ssl and the TLS encryption of the block (microseconds), longer when the thread is
preempted there (by another thread holding the GIL, or by the OS on a busy node). A process frozen
exactly there still sends that block when it wakes; frozen inside the headers' window, its body check
still stops the request. docs/safety.md ("Writes fenced up to the socket") has the measured figures and
what covers the rest.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gitops_sync.errors import FencedError

if TYPE_CHECKING:  # urllib3 is imported by whoever makes a pool (kubeconfig.py), not by commands without one
    import urllib3
    from urllib3.connection import HTTPConnection


@dataclass(frozen=True)
class Fence:
    """Whether a write may still leave (`allows`, asked at every block), and what it is (for the error)."""

    allows: Callable[[], bool]
    what: str

    def check(self, when: str) -> None:
        if not self.allows():
            raise FencedError(
                f"not writing {self.what}: this replica may not write now (not the leader or shard holder, "
                f"detect-only, or shutting down; {when})"
            )


_current: ContextVar[Fence | None] = ContextVar("gitops_sync_write_fence", default=None)


@contextlib.contextmanager
def fenced(fence: Fence | None) -> Iterator[None]:
    """Every block this thread sends inside the block passes `fence` first (None: no fence)."""
    if fence is None:
        yield
        return
    token = _current.set(fence)
    try:
        yield
    finally:
        _current.reset(token)


WIRE_CHECK = "checked again as the request was about to be sent"


def _send(conn: HTTPConnection, data: Any, unfenced: Callable[[Any], None]) -> None:
    """http.client's `send`, with the current fence asked right before every write to the socket.

    The writes go to the socket in non-blocking mode: on a socket with a timeout, Python first polls for
    writability and takes the GIL back before the write syscall, and a frozen process was seen to stop
    exactly there (in poll, or waiting for the GIL) and write on waking, its check long passed. Here
    nothing waits between the check and the syscall; when the socket is full the wait for room comes
    before the next check."""
    fence = _current.get()
    if fence is None or hasattr(data, "read"):  # a file body (never ours): checked once, sent as http.client does
        if fence is not None:
            fence.check(WIRE_CHECK)
        unfenced(data)
        return
    import ssl

    if conn.sock is None and conn.auto_open:
        conn.connect()  # a TLS handshake can take long: the fence is asked after it, not before
    sys.audit("http.client.send", conn, data)
    sock = conn.sock
    timeout = sock.gettimeout()
    view = memoryview(data).cast("B")
    sock.settimeout(0.0)
    try:
        while view:
            fence.check(WIRE_CHECK)
            try:
                view = view[sock.send(view) :]
            except (BlockingIOError, ssl.SSLWantWriteError):  # the same bytes are tried again (TLS needs them)
                _wait(sock, timeout, write=True)
            except ssl.SSLWantReadError:
                _wait(sock, timeout, write=False)
    except FencedError:
        conn.close()  # whatever of this request went out (its headers, part of its body) is never completed
        raise
    finally:
        if conn.sock is sock:
            sock.settimeout(timeout)


def _wait(sock: Any, timeout: float | None, *, write: bool) -> None:
    from urllib3.util.wait import wait_for_read, wait_for_write

    if not (wait_for_write if write else wait_for_read)(sock, timeout):
        raise TimeoutError(f"the socket took no more of the request within {timeout}s")


@functools.lru_cache(maxsize=16)  # keyed by a class (plain, TLS, a proxy's): a handful
def _fenced_connection(base: type[HTTPConnection]) -> type[HTTPConnection]:
    def send(self: HTTPConnection, data: Any) -> None:
        _send(self, data, lambda block: base.send(self, block))

    return type(f"Fenced{base.__name__}", (base,), {"send": send, "__module__": __name__, "_fenced": True})


@functools.lru_cache(maxsize=16)  # keyed by a class (plain, TLS, a proxy's): a handful
def _fenced_pool(base: type[Any]) -> type[Any]:
    if getattr(base.ConnectionCls, "_fenced", False):
        return base
    attrs = {"ConnectionCls": _fenced_connection(base.ConnectionCls), "__module__": __name__}
    return type(f"Fenced{base.__name__}", (base,), attrs)


def install(pool: urllib3.PoolManager) -> urllib3.PoolManager:
    """Make every connection `pool` opens ask the current fence before each send (whatever its classes:
    plain, TLS, or a proxy manager's own)."""
    pool.pool_classes_by_scheme = {scheme: _fenced_pool(cls) for scheme, cls in pool.pool_classes_by_scheme.items()}
    pool.clear()  # a pool made before this would keep its unfenced connections
    return pool


__all__ = ["Fence", "fenced", "install"]
