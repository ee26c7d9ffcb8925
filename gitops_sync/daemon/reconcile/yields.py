"""Yielding: fields Git sets that the daemon stops correcting, so two controllers stop fighting forever.

Two ways in:
- a *fight*: another manager took the field from us `threshold` times within `window` (history.py sees
  every change of hands through the watch);
- an *autoscaler*: `.spec.replicas` owned through the `scale` subresource by `kube-controller-manager`
  with a HorizontalPodAutoscaler pointing at the object: recognised at once, no fight needed (unless
  Git is told to win over autoscalers).

While a field is yielded every pass applies the object without it (`body`): server-side apply then
drops our ownership and the other manager keeps the value; the rest of the object stays converged.
Ways out: Git's value for the field changes (`resume_changed`), the other manager has not written it
for `window` (`expired`, fights only), or the HPA is gone (`autoscaler_gone`). The loop reports each
step (log, Event, /status `yields`, the object's `yielded` entries); nothing here does I/O.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gitops_sync.conventions import MASK
from gitops_sync.daemon.reconcile.history import FieldRecord, Fight, object_dict
from gitops_sync.formatting import brief, rfc3339
from gitops_sync.plan import actors, fieldpath, ownership
from gitops_sync.plan.autoscaler import ADVICE, Autoscaler, is_autoscaler
from gitops_sync.plan.changeset import Yielded
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest, ObjectKey, is_secret

FIGHT = "fight"
AUTOSCALER = "autoscaler"


@dataclass
class Yield:
    """One field left to another manager, and why."""

    key: ObjectKey
    path: str
    reason: str  # FIGHT | AUTOSCALER
    desired: Any  # Git's value when we yielded: a different one in Git resumes
    live: Any
    manager: str
    operation: str
    subresource: str
    since: float
    last_write: float  # when the other manager last wrote the field (local clock)
    autoscaler: Autoscaler | None = None
    records: list[FieldRecord] = field(default_factory=list)

    @property
    def actor(self) -> str:
        if self.autoscaler is not None:
            return self.autoscaler.describe()
        return actors.describe(self.manager, self.operation, self.subresource)

    def advice(self) -> str:
        if self.reason == AUTOSCALER:
            return ADVICE
        return (
            f"decide who owns {self.path}: remove it from Git or add an ignore rule if {self.manager} "
            f"should own it, else stop {self.manager} from writing it"
        )

    def message(self) -> str:
        """One line for the log and the Event; Secret values never included."""
        secret = is_secret(self.key)
        values = "" if secret else f": Git says {brief(self.desired)}, live {brief(self.live)}"
        why = (
            "it scales the object"
            if self.reason == AUTOSCALER
            else f"it took the field {self._takes()} times within the fight window"
        )
        return (
            f"not correcting {self.path}, left to {self.actor} ({self.manager}, {self.operation}"
            f"{'/' + self.subresource if self.subresource else ''}) because {why}{values}; {self.advice()}"
        )

    def _takes(self) -> int:
        return takes(self.records, self.manager)

    def to_field(self) -> Yielded:
        secret = is_secret(self.key)
        return Yielded(
            path=self.path,
            desired=MASK if secret else self.desired,
            live=MASK if secret else self.live,
            manager=self.manager,
            operation=self.operation,
            subresource=self.subresource,
            actor=self.actor,
            reason=self.reason,
            since=rfc3339(self.since),
            advice=self.advice(),
            autoscaler=self.autoscaler.to_dict() if self.autoscaler else None,
            changes=[
                {
                    "manager": r.manager,
                    "operation": r.operation,
                    "subresource": r.subresource,
                    "value": MASK if secret and r.value is not None else r.value,
                    "time": r.time,
                    "observed": rfc3339(r.observed, 3),
                }
                for r in self.records
            ],
        )

    def to_dict(self) -> dict[str, Any]:
        """For /status `yields`: the object, then the field entry."""
        return {**object_dict(self.key), **self.to_field().to_dict()}


class Yields:
    """Thread-safe: the watch threads add fight yields, the reconciler reads and resumes them."""

    def __init__(
        self,
        *,
        threshold: int = 3,
        window: float = 600.0,
        autoscaler_wins: bool = True,
        field_manager: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.threshold = max(2, threshold)
        self.window = window
        self.autoscaler_wins = autoscaler_wins
        self.field_manager = field_manager
        self._clock = clock
        self._lock = threading.Lock()
        self._yields: dict[tuple[ObjectKey, str], Yield] = {}
        # The same yields by object: every pass asks per object (`has`, `of`, `body`), and a scan of all
        # yields per object made a pass quadratic where many objects are autoscaled (20,000 objects of which
        # 2,000 autoscaled: 14 s of look-ups per pass). Kept in step with `_yields` by `_put` and `_drop`.
        self._by_key: dict[ObjectKey, dict[str, Yield]] = {}
        # Autoscaler fields resumed because Git changed (object → paths): Git's new value is applied once
        # before the HPA (which still owns the field until then) can be yielded to again.
        self._suppressed: dict[ObjectKey, set[str]] = {}

    def _put(self, k: tuple[ObjectKey, str], y: Yield) -> None:
        self._yields[k] = y
        self._by_key.setdefault(k[0], {})[k[1]] = y

    def _drop(self, k: tuple[ObjectKey, str]) -> None:
        del self._yields[k]
        paths = self._by_key[k[0]]
        del paths[k[1]]
        if not paths:
            del self._by_key[k[0]]

    # -- in ---------------------------------------------------------------------------------

    def after_fight(self, fight: Fight, target: Target | None) -> Yield | None:
        """A fight the watch just extended: yield when its latest writer took the field often enough."""
        if target is None or not fight.records:
            return None
        now = self._clock()
        recent = [r for r in fight.records if r.observed >= now - self.window]
        if not recent:
            return None
        last = recent[-1]
        if last.manager in ("", self.field_manager):
            return None
        if is_autoscaler(last.manager, last.subresource) and not self.autoscaler_wins:
            return None  # Git wins over autoscalers: keep correcting, keep reporting the fight
        if takes(recent, last.manager) < self.threshold:
            return None
        desired = fieldpath.get(target.manifest, fight.path)
        if desired is fieldpath.MISSING:
            return None
        with self._lock:
            key = (fight.key, fight.path)
            if key in self._yields:
                self._yields[key].last_write = last.observed
                return None
            y = Yield(
                key=fight.key,
                path=fight.path,
                reason=FIGHT,
                desired=desired,
                live=last.value,
                manager=last.manager,
                operation=last.operation,
                subresource=last.subresource,
                since=now,
                last_write=last.observed,
                records=recent,
            )
            self._put(key, y)
            return y

    def for_autoscaler(self, target: Target, live: Manifest, hpa: Autoscaler) -> list[Yield]:
        """Fields of `target` owned through `scale` by the HPA controller: yielded at once (new ones returned)."""
        if not self.autoscaler_wins:
            return []
        out = []
        now = self._clock()
        for entry in ownership.managed_fields(live):
            if not is_autoscaler(entry.manager, entry.subresource):
                continue
            for path in sorted(entry.owned_paths):
                desired = fieldpath.get(target.manifest, path)
                if desired is fieldpath.MISSING:
                    continue  # Git does not set it: nothing to fight over
                value = fieldpath.get(live, path)
                with self._lock:
                    if (target.key, path) in self._yields or path in self._suppressed.get(target.key, ()):
                        continue
                    y = Yield(
                        key=target.key,
                        path=path,
                        reason=AUTOSCALER,
                        desired=desired,
                        live=None if value is fieldpath.MISSING else value,
                        manager=entry.manager,
                        operation=entry.operation,
                        subresource=entry.subresource,
                        since=now,
                        last_write=now,
                        autoscaler=hpa,
                    )
                    self._put((target.key, path), y)
                out.append(y)
        return out

    def noted_write(self, key: ObjectKey, records: Mapping[str, Sequence[FieldRecord]]) -> None:
        """The watch saw the object again: a yielded field the other manager wrote again stays yielded longer."""
        with self._lock:
            for path, y in self._by_key.get(key, {}).items():
                rs = records.get(path) or ()
                if rs and rs[-1].manager == y.manager:
                    y.last_write = max(y.last_write, rs[-1].observed)
                    y.live = rs[-1].value

    # -- use --------------------------------------------------------------------------------

    def has(self, key: ObjectKey) -> bool:
        with self._lock:
            return key in self._by_key

    def of(self, key: ObjectKey) -> list[Yield]:
        with self._lock:
            return list(self._by_key.get(key, {}).values())

    def all(self) -> list[Yield]:
        with self._lock:
            return sorted(self._yields.values(), key=lambda y: (y.key, y.path))

    def autoscaled_keys(self) -> set[ObjectKey]:
        with self._lock:
            return {k for (k, _), y in self._yields.items() if y.reason == AUTOSCALER}

    def body(self, target: Target, live: Manifest | None) -> Target:
        """`target` without the yielded fields another manager owns live; unchanged when none.

        A yielded field we happen to own (our correction landed just before the yield) stays in the body:
        leaving it out would delete it, not hand it over. The next change of hands hands it over.
        """
        ys = self.of(target.key)
        if not ys or live is None:
            return target
        manifest = target.manifest
        for y in ys:
            if ownership.owners_excluding(live, y.path, manager=self.field_manager):
                manifest = fieldpath.remove(manifest, y.path)
        return target if manifest is target.manifest else replace(target, manifest=manifest)

    # -- out --------------------------------------------------------------------------------

    def resume_changed(self, targets: Mapping[ObjectKey, Target]) -> list[Yield]:
        """A new revision: yields whose field Git now sets to another value (or no longer sets) end."""
        out = []
        with self._lock:
            for k, y in list(self._yields.items()):
                target = targets.get(y.key)
                if target is None:
                    self._drop(k)
                    continue
                value = fieldpath.get(target.manifest, y.path)
                if value is fieldpath.MISSING or value != y.desired:
                    self._drop(k)
                    out.append(y)
                    if y.reason == AUTOSCALER:
                        self._suppressed.setdefault(k[0], set()).add(k[1])
        return out

    def settle(self, key: ObjectKey, live: Manifest) -> None:
        """After a resume for a Git change: once our apply owns the field again, the HPA may be yielded to anew."""
        with self._lock:
            waiting = sorted(self._suppressed.get(key, ()))
        for path in waiting:
            if any(e.identity == (self.field_manager, "Apply", "") for e in ownership.owners(live, path)):
                with self._lock:
                    paths = self._suppressed.get(key)
                    if paths is not None:
                        paths.discard(path)
                        if not paths:
                            del self._suppressed[key]

    def suppressed(self, key: ObjectKey) -> bool:
        with self._lock:
            return key in self._suppressed

    def expired(self) -> list[Yield]:
        """Fight yields whose other manager has not written the field for a whole window."""
        now = self._clock()
        out = []
        with self._lock:
            for k, y in list(self._yields.items()):
                if y.reason == FIGHT and now - y.last_write > self.window:
                    self._drop(k)
                    out.append(y)
        return out

    def next_expiry(self) -> float | None:
        """Seconds until the earliest fight yield may expire (for a timer), None without any."""
        now = self._clock()
        with self._lock:
            due = [y.last_write + self.window - now for y in self._yields.values() if y.reason == FIGHT]
        return max(0.0, min(due)) if due else None

    def autoscaler_gone(self, key: ObjectKey) -> list[Yield]:
        """The HPA that scaled `key` no longer points at it: Git's value applies again."""
        out = []
        with self._lock:
            for path, y in list(self._by_key.get(key, {}).items()):
                if y.reason == AUTOSCALER:
                    self._drop((key, path))
                    out.append(y)
        return out

    def forget(self, keys: Iterable[ObjectKey]) -> None:
        with self._lock:
            for key in set(keys):
                for path in list(self._by_key.get(key, ())):
                    self._drop((key, path))
                self._suppressed.pop(key, None)


def takes(records: Sequence[FieldRecord], manager: str) -> int:
    """How many times `manager` took the field: runs of its records, each after someone else's."""
    count, previous = 0, None
    for r in records:
        if r.manager == manager and previous != manager:
            count += 1
        previous = r.manager
    return count
