"""Wait until applied objects are healthy (kstatus rules, `gitops_sync.health`), and pruned ones gone.

`wait_current` polls for `sync --wait`; the objects still not Current go back to the engine, which names
them in the `--wait` timeout error. `wait_gone` polls pruned objects finalizers still hold.
`wait_crds_established` lets the applier's first stage (CRDs) settle before custom resources are applied.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
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


def wait_gone(
    client: Client, paths: Mapping[ObjectKey, str], timeout: float, interval: float = 0.5, *, concurrency: int
) -> set[ObjectKey]:
    """Poll until every object is gone; returns the keys still Terminating when `timeout` passed.

    An object found without a deletionTimestamp is another one, created since under the same name (a
    deletionTimestamp is never taken back): the one being deleted is gone."""
    deadline = time.monotonic() + timeout

    def there(key: ObjectKey) -> bool:
        obj = client.get_or_none(paths[key])
        return obj is not None and bool((obj.get("metadata") or {}).get("deletionTimestamp"))

    left = list(paths)
    while left:
        left = [k for k, still in zip(left, each(there, left, concurrency=concurrency), strict=True) if still]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(interval)
    return set(left)


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
