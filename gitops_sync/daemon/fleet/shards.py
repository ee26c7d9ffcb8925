"""The fleet's shards: one `coordination.k8s.io` Lease per shard, stepped by one thread.

Sources map to one of `--shards` shards by a stable hash of namespace/name (gitsync.py `shard_of`); a
replica runs the passes of the shards it holds (at most `--max-shards`), and only while it holds a shard
may that shard's sources write. The controller (controller.py) learns of a shard taken, lost, fenced
again or left vacant through the callbacks; its status writer says so in the GitSyncs of a vacant one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gitops_sync.cluster.client import Client
from gitops_sync.cluster.lease import ApiLeaseStore, LeaderElector
from gitops_sync.daemon.process.controller import DaemonOptions

SHARD_LEASE_PREFIX = "gitops-sync-shard-"


class ShardSet:
    """One LeaderElector per shard, stepped by one thread; a replica holds at most `limit` shards.

    Threads: `run` on the `shards` thread, the only one that steps the electors (and so calls
    `on_change`, `on_reopen`, `on_vacant`); `can_write`, `held`, `status` and `problem` from any thread
    (workers' fences, HTTP); `release` from the stop, after the workers drained."""

    def __init__(
        self,
        opts: DaemonOptions,
        client: Client,
        namespace: str,
        on_change: Callable[[int, bool], None],
        on_reopen: Callable[[int], None] = lambda shard: None,
        on_vacant: Callable[[int], None] = lambda shard: None,
    ) -> None:
        self.on_reopen = on_reopen
        self.on_vacant = on_vacant  # a shard nobody holds, seen by a replica that will not take it
        self._fenced: set[int] = set()  # shards held whose renewal is overdue: nothing of theirs is written
        self.count = max(opts.shards, 1)
        self.limit = opts.max_shards or self.count
        self.elect = opts.leader_elect
        self.retry = opts.leader.retry_period
        self.electors: list[LeaderElector] = []
        self._stop = threading.Event()
        if self.elect:
            for i in range(self.count):
                store = ApiLeaseStore(client, namespace, f"{SHARD_LEASE_PREFIX}{i}")
                self.electors.append(
                    LeaderElector(
                        store,
                        opts.identity,
                        opts.leader,
                        on_started=lambda i=i: on_change(i, True),  # type: ignore[misc]
                        on_stopped=lambda i=i: on_change(i, False),  # type: ignore[misc]
                    )
                )

    def can_write(self, shard: int) -> bool:
        return not self.elect or self.electors[shard].can_write()

    def held(self) -> list[int]:
        if not self.elect:
            return list(range(self.count))
        return [i for i, e in enumerate(self.electors) if e.is_leader]

    def run(self) -> None:
        """Renew what is held; try for free shards only while holding fewer than the limit. A shard still
        held whose fence closed (renewal overdue: its passes were skipped) and opened again is reported
        to `on_reopen`: no Lease changed hands, so no on_change says its sources need a pass."""
        while not self._stop.is_set():
            held = len(self.held())
            for i, e in enumerate(self.electors):
                if e.is_leader and not e.can_write():  # before its step: only this thread renews it
                    self._fenced.add(i)
                if e.is_leader:
                    e.step()
                elif held < self.limit and e.step():
                    held += 1
                elif held >= self.limit:  # at the limit: look only, so a shard nobody holds is named
                    e.look()
                if e.vacant() and held >= self.limit:
                    self.on_vacant(i)
                if e.is_leader and not e.can_write():
                    self._fenced.add(i)
                elif i in self._fenced:
                    self._fenced.discard(i)
                    if e.is_leader:
                        self.on_reopen(i)
            self._stop.wait(self.retry)

    def stop(self) -> None:
        self._stop.set()

    def release(self) -> None:
        for e in self.electors:
            e.release()

    def vacant(self) -> list[int]:
        """Shards no replica holds, as this one last saw their Leases."""
        return [i for i, e in enumerate(self.electors) if e.vacant()]

    def problem(self) -> str:
        """Why this replica is not doing its part ("" = it is): a Lease it cannot read or write, or a free
        shard it could take and has not (yet)."""
        for e in self.electors:
            if e.error:
                return f"cannot write Lease {e.store.where}: {e.error}"
        vacant = self.vacant()
        if vacant and len(self.held()) < self.limit:
            return f"shard {vacant[0]} is held by no replica and not taken yet"
        return ""

    def status(self) -> list[dict[str, Any]]:
        if not self.elect:
            return [{"shard": i, "held": True, "holder": "", "lease": ""} for i in range(self.count)]
        return [
            {
                "shard": i,
                "held": e.is_leader,
                "holder": e.holder,
                "lease": e.store.where,
                "vacant": e.vacant(),
                **({"error": e.error} if e.error else {}),
            }
            for i, e in enumerate(self.electors)
        ]


def vacant_message(shard: int, lease: str) -> str:
    """What a GitSync of a shard nobody holds says instead of "first sync in progress" for ever."""
    return (
        f"no replica holds shard {shard} (Lease {lease} free or expired): start another replica "
        "or raise --max-shards so that every shard is held"
    )


__all__ = ["SHARD_LEASE_PREFIX", "ShardSet", "vacant_message"]
