"""A daemon replica with fault seams, for tests/reliability/test_leader_fence.py.

`python -m tests.reliability.frozen_replica run ...` is `gitops-sync run ...` with, from the environment:

- FROZEN_REPLICA_STOP_AT=name:N: right after the write fence admitted this replica's N-th write of the
  ConfigMap `name` (past the early check, before the request is made: in `Client._prepare`, which the code
  before the fix and the code after it both call at that point), the process sends itself SIGSTOP and that
  thread waits for SIGCONT: a replica frozen exactly between its check and its send, every time, not one
  round in three.
- FROZEN_REPLICA_NO_WIRE_FENCE=1: the checks at the socket (gitops_sync/cluster/wire.py) are switched off,
  leaving only the early check, as before that check existed: the control arm, measured in the same run.
- FROZEN_REPLICA_MEASURE=1: for every block a fenced write sends, how long after the last fence check began it
  reached `ssl.SSLSocket.send` and how long that send (TLS encryption and the write syscall) took; printed
  at exit (os._exit included) as one JSON line, `frozen-replica: window`, in nanoseconds.
- FROZEN_REPLICA_AGENT=suffix: appended to the User-Agent of every request, so the audit log tells this
  replica's writes from the other's.

It prints JSON lines (the test reads them from its log): `frozen-replica: stopping`, `frozen-replica:
resumed`, `frozen-replica: refused at the socket`.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import signal
import ssl
import sys
import threading
import time
from typing import Any

from gitops_sync.cluster.client import Client

WRITES = ("POST", "PUT", "PATCH", "DELETE")


def _say(event: str, **fields: Any) -> None:
    """One JSON line of its own, in one write: the daemon's lines go to the same file from other threads,
    and one of them may be half flushed."""
    os.write(2, ("\n" + json.dumps({"event": event, "at": time.time(), **fields}) + "\n").encode())


def _tag_user_agent(suffix: str) -> None:
    real_init = Client.__init__

    def init(self: Client, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        self.user_agent += suffix

    Client.__init__ = init  # type: ignore[method-assign]


def _stop_after_fence(name: str, nth: int) -> None:
    from gitops_sync.daemon.process.controller import FencedClient

    real = Client._prepare
    counter = itertools.count(1)
    lock = threading.Lock()
    # SIGSTOP to oneself stops the other threads at once but this one only at its next return from the
    # kernel (it was seen to send its request first): it waits for SIGCONT itself, so nothing it does
    # between its check and the continue can happen before the continue.
    continued = threading.Event()
    signal.signal(signal.SIGCONT, lambda signum, frame: continued.set())

    def prepare(self: Client, method: str, path: str, query: Any, content_type: Any, accept: Any) -> Any:
        dry = bool(query and query.get("dryRun"))
        if isinstance(self, FencedClient) and method in WRITES and path.endswith(f"/configmaps/{name}") and not dry:
            with lock:
                n = next(counter)
            if n == nth:
                _say("frozen-replica: stopping", write=n, method=method, path=path)
                os.kill(os.getpid(), signal.SIGSTOP)
                continued.wait()
                _say("frozen-replica: resumed", write=n, method=method, path=path)
        return real(self, method, path, query, content_type, accept)

    Client._prepare = prepare  # type: ignore[method-assign]


def _wire(*, enabled: bool, measure: bool) -> None:
    try:
        from gitops_sync.cluster import wire
    except ImportError:  # the code before the fix: there is no check at the socket to switch off or time
        return
    from gitops_sync.errors import FencedError

    real_check = wire.Fence.check
    last = threading.local()

    def check(self: Any, when: str) -> None:
        if when != wire.WIRE_CHECK:
            real_check(self, when)
            return
        if not enabled:
            return
        asked = time.perf_counter_ns()  # taken before: a freeze right after the check still counts in full
        try:
            real_check(self, when)
        except FencedError as exc:
            _say("frozen-replica: refused at the socket", error=str(exc))
            raise
        last.checked = asked

    wire.Fence.check = check  # type: ignore[method-assign]
    if not measure:
        return
    blocks: list[tuple[int, int, int]] = []  # (when the send began, ns since the check, ns the send took)
    real_send = ssl.SSLSocket.send

    def send(self: ssl.SSLSocket, data: Any, flags: int = 0) -> int:
        checked = getattr(last, "checked", None)
        entered = time.perf_counter_ns()
        try:
            return real_send(self, data, flags)
        finally:
            if checked is not None:
                last.checked = None
                blocks.append((entered, entered - checked, time.perf_counter_ns() - entered))

    ssl.SSLSocket.send = send  # type: ignore[method-assign]
    real_exit = os._exit

    def report() -> None:
        _say("frozen-replica: window", blocks=blocks)

    def exit_after_report(code: int) -> None:  # `run` leaves with os._exit after its clean shutdown
        report()
        real_exit(code)

    os._exit = exit_after_report  # type: ignore[assignment]
    atexit.register(report)


def main() -> None:
    from gitops_sync.cli import main as cli_main

    if os.environ.get("FROZEN_REPLICA_AGENT"):
        _tag_user_agent(os.environ["FROZEN_REPLICA_AGENT"])
    if os.environ.get("FROZEN_REPLICA_STOP_AT"):
        name, _, nth = os.environ["FROZEN_REPLICA_STOP_AT"].partition(":")
        _stop_after_fence(name, int(nth or 1))
    _wire(
        enabled=not os.environ.get("FROZEN_REPLICA_NO_WIRE_FENCE"),
        measure=bool(os.environ.get("FROZEN_REPLICA_MEASURE")),
    )
    sys.argv = ["gitops-sync", *sys.argv[1:]]
    cli_main()


if __name__ == "__main__":
    main()
