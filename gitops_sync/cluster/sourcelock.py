"""A one-shot `sync`'s hold on its source's Lease: taken at the first write, so two runs never write at once.

The Lease is the daemon's own (lease.py: `lease_name`, `LeaderElector`); the client's write hook
(`Client.before_write`) calls `SourceLock.before_write`, which takes it, waits for it, or refuses the write.
The caller (`sync`: cli/pass_commands.py) plans the pass again when LeaseChanged says its reads may predate
another run's writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gitops_sync.errors import ClusterError, ForbiddenError, LeaseError, NotFoundError
from gitops_sync.log import get_logger
from gitops_sync.resource import resource_version

if TYPE_CHECKING:
    from gitops_sync.cluster.lease import LeaderElector

log = get_logger(__name__)


class LeaseChanged(Exception):  # control flow, not an error: nothing catches it as one
    """Another run held the source's Lease while this pass read the cluster: what it read may predate that
    run's writes. Raised by the first write, before it leaves; the caller plans the pass again under the Lease."""


class SourceLock:
    """The source's Lease (the daemon's own, `lease_name`), held by a one-shot `sync` from its first write on.

    A daemon of the source and every `sync` of it take this one Lease, so two runs never write at once.
    It is taken lazily, by the client's write hook (`before_write`): a pass with nothing to write reads the
    Lease once and writes nothing. A pass that saw the Lease free before it read anything (`observe`) and
    took over that very record (its resourceVersion) read nothing another run wrote meanwhile; otherwise its
    reads may be stale, and its first write raises LeaseChanged (nothing sent): the caller plans again,
    now under the Lease. Held, the Lease is renewed every retry period; once a renewal is overdue past the
    renew deadline (a frozen or cut-off run) every further write is refused, before another run may take it.
    """

    def __init__(
        self,
        elector: LeaderElector,
        *,
        timeout: float,
        exempt: Callable[[str], bool] = lambda _path: False,
        namespace: str = "",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        notice_every: float = 30.0,
    ) -> None:
        self.elector = elector
        self.timeout = max(0.0, timeout)
        self._exempt = exempt  # the Lease's own requests
        self._namespace_path = f"/api/v1/namespaces/{namespace}" if namespace else ""  # the Lease's namespace
        self._clock = clock
        self._sleep = sleep
        self._notice_every = notice_every
        self._mutex = threading.Lock()
        self._free_at: str | None = None  # resourceVersion of the Lease seen free before the pass ("" = absent)
        self._held = False
        self._stale = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.waited = 0.0  # seconds the first write waited for the Lease
        self.replans = 0

    @property
    def where(self) -> str:
        return self.elector.store.where

    @property
    def held(self) -> bool:
        return self._held

    def observe(self) -> None:
        """Before the pass reads anything: whether the Lease is free now (absent or released)."""
        try:
            lease = self.elector.observe()
        except ClusterError as exc:  # unknown: the first write (if any) takes it and plans again
            log.debug("cannot read the Lease before the pass", lease=self.where, error=str(exc))
            self._free_at = None
            return
        if lease is None:
            self._free_at = ""
        elif not (lease.get("spec") or {}).get("holderIdentity"):
            self._free_at = resource_version(lease)
        else:
            self._free_at = None

    def before_write(self, method: str, path: str) -> None:
        """The client's hook, called before every write request leaves: take the Lease, or refuse."""
        if self._exempt(path):
            return
        if self._held and not self._stale:
            self._fence(method, path)
            return
        with self._mutex:
            if self._stale:
                raise LeaseChanged()
            if self._held:
                self._fence(method, path)
                return
            if not self._acquire(creating_namespace=method == "PATCH" and path == self._namespace_path):
                return
            self._held = True
            self._renewer = threading.Thread(target=self._renew, name="lease-renewal", daemon=True)
            self._renewer.start()
            if self._free_at is None or self.elector.replaced != self._free_at:
                self._stale = True
                self.replans += 1
                raise LeaseChanged()

    def replan(self) -> None:
        """The caller plans the pass again, under the Lease: writes go out from now on."""
        self._stale = False

    def release(self) -> None:
        """At the end of the pass (also a failed one): stop renewing and give the Lease up at once."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=10)
        if self._held:
            self.elector.release()
            self._held = False

    def _fence(self, method: str, path: str) -> None:
        if not self.elector.can_write():
            raise ClusterError(
                f"not writing {method} {path}: this run lost {self.where} (not renewed within "
                f"{self.elector.config.renew_deadline:g}s), another run may hold it now"
            )

    def _acquire(self, *, creating_namespace: bool) -> bool:
        """Hold the Lease (True), waiting up to the timeout. False: this write creates the Lease's namespace
        (Git declares the inventory's namespace), so no run of this source can hold a Lease there yet."""
        started = self._clock()
        deadline = started + self.timeout
        noticed = float("-inf")
        contended = False  # another run held it at least once: only then is the wait worth a warning
        while True:
            try:
                if self.elector.try_step():
                    break
                contended = True
            except NotFoundError as exc:  # the Lease's namespace does not exist
                if creating_namespace:
                    return False
                raise LeaseError(
                    f"cannot take {self.where}: its namespace does not exist ({exc}); create it, declare it in "
                    "Git, or pass --inventory-namespace (or --lock-namespace). Nothing was written"
                ) from exc
            except ForbiddenError as exc:
                raise LeaseError(
                    f"may not take {self.where}: {exc}. A sync that writes holds its source's Lease so that two "
                    "runs never write at once; it needs get, create and update on leases (coordination.k8s.io) "
                    "in that namespace. Nothing was written"
                ) from exc
            except ClusterError as exc:
                raise LeaseError(f"cannot take {self.where}: {exc}. Nothing was written") from exc
            now = self._clock()
            if now >= deadline:
                raise LeaseError(
                    f"{self.where} is held by {self._holder()}: another run of this source is writing; waited "
                    f"{now - started:.1f}s (--lock-timeout {self.timeout:g}s). Nothing was written. A daemon of "
                    "this source (run --leader-elect) holds it for as long as it runs: let it apply, or stop it"
                )
            if now - noticed >= self._notice_every:
                noticed = now
                log.warning(
                    "waiting for the Lease of this source",
                    lease=self.where,
                    holder=self._holder(),
                    lock_timeout=f"{self.timeout:g}s",
                    waited=f"{now - started:.1f}s",
                )
            self._sleep(min(self.elector.config.retry_period / 2, max(deadline - now, 0.0)))
        self.waited = self._clock() - started
        if contended:  # a slow create under load is no wait for another run (and stderr stays quiet)
            log.warning("took the Lease of this source", lease=self.where, waited=f"{self.waited:.1f}s")
        return True

    def _holder(self) -> str:
        seen = self.elector.seen
        holder = str(seen.get("holderIdentity") or "(nobody)")
        since, renewed = seen.get("acquireTime"), seen.get("renewTime")
        return f"{holder} since {since or '?'} (renewed {renewed or '?'})"

    def _renew(self) -> None:
        while not self._stop.wait(self.elector.config.retry_period):
            self.elector.step()
