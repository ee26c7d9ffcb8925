"""The fleet's clock-driven triggers: a Git poll of each source at its own interval, the periodic full
resync of every source, and a second look at a repository refused for where it leads.

Only queues keys (the scheduler runs them); a refused repository is looked at again through the
controller's `recheck` (the file system may have changed, a symlink removed, not the GitSync, so no event
of it would load it again). Runs on the poller thread; `next_poll` of each record is its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gitops_sync.daemon.fleet.clusters import KUBECONFIG_REASONS
from gitops_sync.daemon.fleet.registry import Registry
from gitops_sync.daemon.fleet.sources import FleetKey
from gitops_sync.daemon.reconcile.reporter import FULL, SOURCE
from gitops_sync.errors import RepositoryNotAllowed


class Poller:
    def __init__(
        self,
        registry: Registry,
        add: Callable[[FleetKey], None],
        recheck: Callable[[str], None],
        *,
        resync: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.add = add
        self.recheck = recheck
        self.resync = resync
        self.clock = clock
        self._last_resync = clock()
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.wait(0.5):
            self.tick()

    def stop(self) -> None:
        self._stop.set()

    def tick(self) -> None:
        """Queue what is due now: polls of sources whose interval passed, a full resync when it is time."""
        now = self.clock()
        resync = self.resync > 0 and now - self._last_resync >= self.resync
        if resync:
            self._last_resync = now
        due: list[FleetKey] = []
        again: list[str] = []
        for ref, s in self.registry.items():
            poll = s.gs.interval > 0 and now >= s.next_poll and not s.gs.suspend
            if poll:
                s.next_poll = now + s.gs.interval
            if s.reconciler is None:
                if poll and s.reason in (RepositoryNotAllowed.reason, *KUBECONFIG_REASONS):
                    again.append(ref)
                continue
            if poll:
                due.append((ref, SOURCE))
            if resync and not s.gs.suspend:
                due.append((ref, FULL))
        for key in due:
            self.add(key)
        for ref in again:
            self.recheck(ref)


__all__ = ["Poller"]
