"""Tests that run with no other test beside them, under pytest-xdist: the `alone` mark.

A timing figure (a probe's latency under a flood, SIGTERM to exit, a healthy cluster's p95 beside a hung one)
means nothing when other workers' tests share the two cores. The workers of one run share a readers-writer
lock (flock on two files): every test holds it shared from its setup to its teardown; a test marked `alone`
holds it exclusively. A writer first closes the gate, so no new test starts, then waits for the tests in
flight; a worker keeps the lock between two consecutive `alone` tests, so a block of them waits once.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO

import pytest

ALONE = pytest.mark.alone  # registered in pyproject.toml


class Lock:
    """One worker's side of the run's readers-writer lock in `directory` (shared by the run's workers)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.gate, self.main = directory / "gate", directory / "main"
        self._held: IO[str] | None = None
        self.exclusive = False

    def acquire(self, exclusive: bool) -> None:
        if self._held is not None and exclusive and self.exclusive:
            return  # the previous test was alone too: nothing ran between, nothing needs to
        self.release()
        with self.gate.open("a") as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)  # a writer holds it while waiting: readers queue behind it
            held = self.main.open("a")
            fcntl.flock(held, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        self._held, self.exclusive = held, exclusive

    def release(self) -> None:
        if self._held is not None:
            fcntl.flock(self._held, fcntl.LOCK_UN)
            self._held.close()
            self._held = None
