"""Leader election on a coordination.k8s.io/v1 Lease, the way client-go's leaderelection does it.

Two replicas must never write at once. The holder renews every `retry_period`; a follower takes the
Lease only when its record has not changed for `lease_duration` *as measured on the follower's own
clock* (no trust in clock sync between nodes). Every update carries the resourceVersion it read, so
two candidates racing for an expired Lease cannot both win. The holder stops writing as soon as it
has not renewed for `renew_deadline` (< lease_duration), before any follower may take over: that
margin is what makes the fence in `can_write` safe.

The fence is a deadline: the start of the last successful renewal (before its requests were sent, so
never later than the follower's view of it) plus `renew_deadline`, on `fence_clock`. `can_write` is
one clock read and one comparison, cheap enough to be asked again right before each write's bytes go to
the socket (cluster/wire.py), so a leader frozen after an earlier check finds its fence closed when it
wakes instead of writing on an admission it got before its Lease expired.
"""

from __future__ import annotations

import hashlib
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gitops_sync.cluster.client import Client
from gitops_sync.cluster.sourcelock import LeaseChanged, SourceLock
from gitops_sync.errors import ClusterError, ConflictError, NotFoundError
from gitops_sync.formatting import rfc3339
from gitops_sync.log import get_logger
from gitops_sync.resource import Manifest, resource_version

log = get_logger(__name__)

# A one-shot run's hold on the same Lease (SourceLock) lives in sourcelock.py; cli/pass_commands.py imports it
# from here.
__all__ = [
    "ApiLeaseStore",
    "LeaderConfig",
    "LeaderElector",
    "LeaseChanged",
    "LeaseStore",
    "SourceLock",
    "cli_identity",
    "default_identity",
    "fence_clock",
    "lease_name",
]


def fence_clock() -> float:
    """Seconds on CLOCK_BOOTTIME where there is one (Linux), else time.monotonic.

    Like CLOCK_MONOTONIC it never jumps with the wall clock; unlike it, it keeps counting while the system
    is suspended, so a leader whose machine slept through its Lease finds its fence closed when it wakes.
    """
    return time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()


_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


class LeaseStore(Protocol):
    """Where the Lease lives; ConflictError on a create that finds one or an update with a stale version."""

    def get(self) -> Manifest | None: ...

    def create(self, lease: Manifest) -> Manifest: ...

    def update(self, lease: Manifest) -> Manifest: ...

    @property
    def where(self) -> str: ...


class ApiLeaseStore:
    """The real Lease: GET, POST, PUT (the PUT body carries metadata.resourceVersion)."""

    def __init__(self, client: Client, namespace: str, name: str) -> None:
        self._client = client
        self.namespace = namespace
        self.name = name
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    @property
    def where(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    def owns(self, path: str) -> bool:
        """Whether a request path is this Lease's own (its collection, for the create, or the object)."""
        return path in (self._collection, f"{self._collection}/{self.name}")

    def get(self) -> Manifest | None:
        try:
            lease: Manifest = self._client.request("GET", f"{self._collection}/{self.name}", timeout=5)
        except NotFoundError:
            return None
        return lease

    def create(self, lease: Manifest) -> Manifest:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **lease}
        body["metadata"] = {**(lease.get("metadata") or {}), "name": self.name, "namespace": self.namespace}
        created: Manifest = self._client.request("POST", self._collection, body=body, timeout=5)
        return created

    def update(self, lease: Manifest) -> Manifest:
        updated: Manifest = self._client.request("PUT", f"{self._collection}/{self.name}", body=lease, timeout=5)
        return updated


@dataclass(frozen=True)
class LeaderConfig:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not (self.retry_period < self.renew_deadline < self.lease_duration):
            raise ValueError("leader election needs retry period < renew deadline < lease duration")


def default_identity() -> str:
    """Unique per process: the pod name (hostname) plus a random suffix, as client-go recommends."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def cli_identity(command: str = "sync") -> str:
    """A one-shot run's holder identity: unique, and saying what holds the Lease to whoever waits for it."""
    return f"{default_identity()} (gitops-sync {command}, pid {os.getpid()})"


def lease_name(inventory_name: str, inventory_namespace: str = "", lease_namespace: str = "") -> str:
    """One Lease per inventory: replicas of one source elect one leader, daemons of two sources two.

    `<inventory>-lease` when that fits and the Lease sits next to the inventory; otherwise (a long
    --name, or Leases of inventories in several namespaces kept in one namespace) the name is cut and a
    hash of namespace/name keeps it unique.
    """
    if len(inventory_name) <= 57 and inventory_namespace == lease_namespace:
        return f"{inventory_name}-lease"
    digest = hashlib.sha256(f"{inventory_namespace}/{inventory_name}".encode()).hexdigest()[:10]
    return f"{inventory_name[:46].rstrip('-.')}-{digest}-lease"


class LeaderElector:
    """The state machine; `step()` is one try, `run()` the loop. Clocks are injectable for tests."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        config: LeaderConfig | None = None,
        *,
        clock: Callable[[], float] = fence_clock,
        wall: Callable[[], float] = time.time,
        on_started: Callable[[], None] | None = None,
        on_stopped: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.identity = identity
        self.config = config or LeaderConfig()
        self._clock = clock
        self._wall = wall
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._lock = threading.Lock()
        self._leading = False
        # clock() when the last successful acquire/renew *started*, plus renew_deadline; -inf when not leading
        self._write_until = float("-inf")
        self._observed: tuple[str, str, str, int] | None = None  # holder, renewTime, rv, duration
        self._observed_at = 0.0
        self._holder = ""
        self._stopped = threading.Event()
        self.transitions = 0
        self.error = ""  # why the last step could not read or write the Lease ("" = it could)
        self.seen: dict[str, Any] = {}  # the spec of the Lease as last read (holder, acquireTime, renewTime)
        self.replaced = ""  # resourceVersion of the Lease our last successful write replaced ("" = created it)

    # -- queries ----------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def holder(self) -> str:
        """The identity holding the Lease as last observed ("" = nobody)."""
        return self._holder

    def vacant(self) -> bool:
        """Nobody holds the Lease as last observed: free, or not renewed for its whole duration. False
        while leading or before the first observation (unknown is not vacant)."""
        if self._leading or self._observed is None:
            return False
        holder, _, _, duration = self._observed
        return not holder or self._clock() - self._observed_at >= duration

    def look(self) -> None:
        """`observe`, its error kept in `error` instead of raised (a replica at its shard limit still sees who
        holds what, and says when it cannot)."""
        try:
            self.observe()
        except ClusterError as exc:
            self.error = str(exc)
            return
        self.error = ""

    @property
    def write_deadline(self) -> float:
        """When (on `clock`) the fence closes unless a renewal succeeds first; -inf when not leading."""
        return self._write_until

    def can_write(self) -> bool:
        """True only while a renew that started less than renew_deadline ago succeeded (one float read:
        no lock, so the last check before a socket write never waits on the elector)."""
        return self._clock() < self._write_until

    # -- one step ---------------------------------------------------------------------------

    def step(self) -> bool:
        """Try to acquire or renew once; returns whether we hold the Lease now. Never raises ClusterError."""
        started = self._clock()
        try:
            ok = self._try_acquire_or_renew(started)
            self.error = ""
        except ClusterError as exc:
            log.warning("leader election: cannot reach the Lease", lease=self.store.where, error=str(exc))
            self.error = str(exc)
            ok = False
        return self._settle(ok, started)

    def try_step(self) -> bool:
        """`step`, but a Lease that cannot be read or written (403, 5xx, unreachable) raises ClusterError."""
        started = self._clock()
        return self._settle(self._try_acquire_or_renew(started), started)

    def observe(self) -> Manifest | None:
        """Read the Lease without taking it (raises ClusterError); its expiry is measured from this first
        sight on. No Lease at all is seen as free from now on (`vacant`)."""
        lease = self.store.get()
        if lease is not None:
            self._note(lease, self._clock())
        else:
            self._observed, self._observed_at, self.seen, self._holder = ("", "", "", 0), self._clock(), {}, ""
        return lease

    def _settle(self, ok: bool, started: float) -> bool:
        if ok:
            with self._lock:
                self._write_until = started + self.config.renew_deadline
            if not self._leading:
                self._set_leading(True)
        elif self._leading and self._holder not in ("", self.identity):
            log.error(
                "leader election: another replica holds the Lease; stepping down",
                lease=self.store.where,
                identity=self.identity,
                holder=self._holder,
            )
            self._set_leading(False)
        elif self._leading and not self.can_write():
            log.error(
                "leader election: lost the Lease (not renewed within the renew deadline)",
                lease=self.store.where,
                identity=self.identity,
            )
            self._set_leading(False)
        return self._leading

    def _try_acquire_or_renew(self, now: float) -> bool:
        wall = rfc3339(self._wall(), 6)
        old = self.store.get()
        if old is None:
            record = self._record(wall, acquire=wall, transitions=0)
            try:
                self._remember(self.store.create(record), now)
            except ConflictError:
                return False  # someone else created it first
            self.replaced = ""
            return True
        spec = old.get("spec") or {}
        holder, duration = self._note(old, now)
        held_by_other = holder not in ("", self.identity)
        if held_by_other and self._observed_at + duration > now:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            record = self._record(wall, acquire=str(spec.get("acquireTime") or wall), transitions=transitions)
        else:
            record = self._record(wall, acquire=wall, transitions=transitions + 1)
        record["metadata"] = {**(old.get("metadata") or {})}
        record["apiVersion"], record["kind"] = old.get("apiVersion", "coordination.k8s.io/v1"), "Lease"
        try:
            self._remember(self.store.update(record), now)
        except (ConflictError, NotFoundError):
            return False
        self.replaced = resource_version(old)
        if holder != self.identity:
            log.info(
                "leader election: acquired the Lease",
                lease=self.store.where,
                identity=self.identity,
                previous=holder or "(released)",
            )
        return True

    def _note(self, lease: Manifest, now: float) -> tuple[str, int]:
        """Remember a Lease read (holder, duration); a record that changed restarts its expiry clock."""
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        duration = int(spec.get("leaseDurationSeconds") or self.config.lease_duration)
        observed = (holder, str(spec.get("renewTime") or ""), resource_version(lease), duration)
        if observed != self._observed:
            self._observed, self._observed_at = observed, now
        self._holder, self.seen = holder, dict(spec)
        return holder, duration

    def _record(self, wall: str, *, acquire: str, transitions: int) -> dict[str, Any]:
        return {
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.config.lease_duration),
                "acquireTime": acquire,
                "renewTime": wall,
                "leaseTransitions": transitions,
            }
        }

    def _remember(self, lease: Manifest, now: float) -> None:
        self.transitions = int((lease.get("spec") or {}).get("leaseTransitions") or 0)
        self._note(lease, now)

    def _set_leading(self, leading: bool) -> None:
        with self._lock:
            if not leading:
                self._write_until = float("-inf")  # closed before anyone hears of it
            self._leading = leading
        callback = self._on_started if leading else self._on_stopped
        if callback is not None:
            callback()

    # -- loop and release -------------------------------------------------------------------

    def run(self) -> None:
        """Until `stop()`: renew every retry period while leading, else try to acquire (with jitter)."""
        while not self._stopped.is_set():
            self.step()
            period = self.config.retry_period
            wait = period if self._leading else period * (1 + 0.2 * random.random())
            self._stopped.wait(wait)

    def stop(self) -> None:
        self._stopped.set()

    def release(self) -> bool:
        """Give the Lease up (empty holder) so a follower takes over at once instead of after 15 s."""
        if not self._leading:
            return False
        self._set_leading(False)
        try:
            old = self.store.get()
            if old is None or (old.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            wall = rfc3339(self._wall(), 6)
            spec = {
                **(old.get("spec") or {}),
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": wall,
                "acquireTime": wall,
            }
            self.store.update({**old, "spec": spec})
        except ClusterError as exc:
            log.warning("leader election: could not release the Lease", lease=self.store.where, error=str(exc))
            return False
        log.info("leader election: released the Lease", lease=self.store.where, identity=self.identity)
        return True
