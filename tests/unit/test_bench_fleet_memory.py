"""The fleet bench's memory sampler counts each address space once (bench/fleet_flux.py)."""

from __future__ import annotations

import os
import threading
import time

from bench.fleet_flux import distinct_memory, same_memory


def test_a_thread_shares_its_process_memory_and_is_counted_once() -> None:
    # A thread is what a vfork child is until it execs: another task in the same address space.
    started, done = threading.Event(), threading.Event()
    tid: list[int] = []

    def run() -> None:
        tid.append(threading.get_native_id())
        started.set()
        done.wait(5)

    t = threading.Thread(target=run)
    t.start()
    try:
        started.wait(5)
        assert same_memory(os.getpid(), tid[0])
        assert distinct_memory([os.getpid(), tid[0]]) == [os.getpid()]
    finally:
        done.set()
        t.join()


def test_a_forked_child_has_memory_of_its_own_and_is_counted() -> None:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only waits to be compared
        time.sleep(2)
        os._exit(0)
    try:
        assert not same_memory(os.getpid(), pid)
        assert distinct_memory([os.getpid(), pid]) == [os.getpid(), pid]
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
