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
http.client and ssl and the TLS encryption of the block (microseconds), plus, when another thread holds
the GIL, up to its switch interval. A process frozen exactly there still sends that block when it wakes
(see README "Safety" for the measured figures and what covers the rest).
"""

from __future__ import annotations

import contextlib
import functools
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


def _before_send(conn: HTTPConnection) -> None:
    """The check itself: connected first (a plain-HTTP connection opens in its first send), then asked."""
    fence = _current.get()
    if fence is None:
        return
    if conn.sock is None and conn.auto_open:
        conn.connect()  # a TLS handshake can take long: the fence is asked after it, not before
    try:
        fence.check("checked again as the request was about to be sent")
    except FencedError:
        conn.close()  # whatever of this request went out (its headers at most) is never completed
        raise


@functools.cache
def _fenced_connection(base: type[HTTPConnection]) -> type[HTTPConnection]:
    def send(self: HTTPConnection, data: Any) -> None:
        _before_send(self)
        base.send(self, data)

    return type(f"Fenced{base.__name__}", (base,), {"send": send, "__module__": __name__, "_fenced": True})


@functools.cache
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
