"""Wait until applied objects are healthy (kstatus rules, `gitops_sync.health`).

`wait_current` polls for `sync --wait`; the objects still not Current go back to the engine, which names
them in the `--wait` timeout error. `wait_crds_established` lets the applier's first stage (CRDs) settle
before custom resources are applied.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gitops_sync.apply.pool import each
from gitops_sync.cluster.client import Client
from gitops_sync.health import Status, assess
from gitops_sync.log import get_logger
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey

log = get_logger(__name__)


@dataclass
class WaitResult:
    key: ObjectKey
    status: Status
    message: str


def wait_current(
    client: Client,
    targets: Sequence[Target],
    timeout: float,
    interval: float = 0.5,
    *,
    concurrency: int,
    on_ready: Callable[[ObjectKey], None] | None = None,
) -> list[WaitResult]:
    """Poll until every target is Current (kstatus rules); returns the ones that are not.

    Each object that becomes Current is logged (info) and passed to `on_ready` (a progress bar).
    """
    started = time.monotonic()
    deadline = started + timeout
    pending = list(targets)
    last: dict[ObjectKey, WaitResult] = {}
    while pending:

        def check(t: Target) -> WaitResult:
            obj = client.get_or_none(t.path)
            if obj is None:
                return WaitResult(t.key, Status.NOT_FOUND, "not found")
            h = assess(obj)
            return WaitResult(t.key, h.status, h.message)

        results = each(check, pending, concurrency=concurrency)
        last = {r.key: r for r in results}
        for r in results:
            if r.status is Status.CURRENT:
                log.info("ready", object=str(r.key), seconds=round(time.monotonic() - started, 1))
                if on_ready:
                    on_ready(r.key)
        failed = [r for r in results if r.status is Status.FAILED]
        pending = [t for t, r in zip(pending, results, strict=True) if r.status is not Status.CURRENT]
        if failed or not pending or time.monotonic() >= deadline:
            break
        time.sleep(interval)
    return [last[t.key] for t in pending]


def wait_crds_established(client: Client, crds: Sequence[Target], timeout: float) -> None:
    """Until each CRD is Established (or `timeout` passes: logged, and its custom resources fail on their own)."""
    deadline = time.monotonic() + timeout
    for t in crds:
        while True:
            obj = client.get_or_none(t.path)
            if obj is not None and assess(obj).status is Status.CURRENT:
                break
            if time.monotonic() > deadline:
                log.warning("CRD not established in time", crd=t.key.name)
                break
            time.sleep(0.2)
