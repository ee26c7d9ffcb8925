"""Field-ownership history and fight detection, fed by the watch.

For every field Git sets, remember who wrote which value and when, as seen through `managedFields`.
A value change is attributed to the manager that owns the field right after it: an Update takes the
field away from every other manager, a forced Apply too, so the owner after a change is its writer.

A *fight* is a field that keeps changing hands: at least two managers have each taken it (with a
different value) at least twice within the window — Helm resets replicas to 3, someone scales to 10,
Helm again, kubectl again. One out-of-band edit that self-heal reverts is drift, not a fight; the
same edit made again after the revert is.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gitops_sync.conventions import HISTORY_SKIP_PREFIXES, MASK
from gitops_sync.formatting import brief, rfc3339
from gitops_sync.plan import fieldpath, ownership
from gitops_sync.resource import Manifest, ObjectKey, is_secret, resource_version


def tracked_paths(desired: Manifest) -> list[str]:
    """The fields of a desired object whose history is kept: what Git sets, minus bookkeeping."""
    # Interned: the objects of one template share their paths (here and as the history's keys).
    return [sys.intern(p) for p in fieldpath.leaf_paths(desired) if not p.startswith(HISTORY_SKIP_PREFIXES)]


def object_dict(key: ObjectKey) -> dict[str, str]:
    """The object's identity as /status spells it, ahead of field detail (fights, yields)."""
    return {"kind": key.kind, "group": key.group, "namespace": key.namespace, "name": key.name}


@dataclass(frozen=True, slots=True)
class FieldRecord:
    """One value of a field and who set it; `time` is the writer's managedFields time (server clock)."""

    value: Any
    manager: str
    operation: str
    subresource: str
    time: str
    observed: float  # local wall clock (epoch seconds) when the watch showed it
    resource_version: str
    owners: tuple[str, ...] = ()

    @property
    def who(self) -> str:
        """`kubectl (Update, scale)`: a manager as users recognise it."""
        detail = ", ".join(p for p in (self.operation, self.subresource) if p)
        return f"{self.manager} ({detail})" if detail else self.manager or "(nobody)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "manager": self.manager,
            "operation": self.operation,
            "subresource": self.subresource,
            "time": self.time,
            "observed": rfc3339(self.observed, 3),
            "resourceVersion": self.resource_version,
            "owners": list(self.owners),
        }


@dataclass
class Fight:
    """A field changing hands back and forth; `records` are the changes inside the window."""

    key: ObjectKey
    path: str
    records: list[FieldRecord]

    @property
    def managers(self) -> list[str]:
        seen: dict[str, None] = {}
        for r in self.records:
            seen.setdefault(r.manager, None)
        return list(seen)

    @property
    def changes(self) -> int:
        return len(self.records)

    def message(self) -> str:
        """One line for logs and Events: field, managers with their values, and when."""
        steps = ", ".join(f"{r.manager}={brief(r.value)} at {_clock(r.observed)}" for r in self.records[-6:])
        return f"field {self.path} is fought over by {' and '.join(self.managers)}: {self.changes} changes ({steps})"

    def to_dict(self) -> dict[str, Any]:
        return {
            **object_dict(self.key),
            "field": self.path,
            "managers": self.managers,
            "changes": self.changes,
            "values": [
                {
                    "manager": r.manager,
                    "operation": r.operation,
                    "subresource": r.subresource,
                    "value": r.value,
                    "time": r.time,
                    "observed": rfc3339(r.observed, 3),
                }
                for r in self.records
            ],
            "first": rfc3339(self.records[0].observed, 3),
            "last": rfc3339(self.records[-1].observed, 3),
        }


@dataclass(slots=True)
class _FieldHistory:
    # A list trimmed to max_records, not a deque(maxlen=...): most fields never change after the first
    # record, and an empty deque alone is ~620 bytes (one 64-slot block) for every field of every object.
    records: list[FieldRecord]
    fight_size: int = 0  # changes in the fight last reported, so each new change reports once


@dataclass
class _ObjectHistory:
    # A field seen with one value only (most of them, for good) holds its record alone, without a
    # _FieldHistory and a list around it (~140 bytes a field); its second value makes it a _FieldHistory.
    fields: dict[str, FieldRecord | _FieldHistory] = field(default_factory=dict)
    # The first sight of the object, not read yet (with `paths_of`): its body and when the watch showed it.
    first: tuple[Manifest, float] | None = None


def _records(fh: FieldRecord | _FieldHistory) -> list[FieldRecord]:
    return [fh] if type(fh) is FieldRecord else list(fh.records)  # type: ignore[union-attr]


class OwnershipHistory:
    """Thread-safe: the watch threads observe, the HTTP server reads.

    `paths_of` (each object's tracked paths, asked only when needed) lets the first sight of an object wait:
    its body is kept as the watch gave it (the watch cache keeps the same body) and its fields are read when a
    later event or a reader needs them. Most objects are never written again once the daemon has created
    them, and reading every field of each at its first event (its tracked paths, each value, each owner) cost
    the watch threads ~0.15 ms per object while the cold apply's requests waited for the GIL (issue 28). The
    records are the same as if read at once: the same body, observed at the same time.
    """

    def __init__(
        self,
        *,
        max_records: int = 50,
        window: float = 3600.0,
        min_takes: int = 2,
        clock: Callable[[], float] = time.time,
        paths_of: Callable[[ObjectKey], Iterable[str]] | None = None,
    ) -> None:
        self._paths_of = paths_of
        self._max = max_records
        self._window = window
        self._min_takes = min_takes
        self._clock = clock
        self._lock = threading.Lock()
        self._objects: dict[ObjectKey, _ObjectHistory] = {}
        self._fights: dict[tuple[ObjectKey, str], Fight] = {}

    def observe(self, key: ObjectKey, paths: Iterable[str] | None, live: Manifest) -> list[Fight]:
        """Record the fields of `live` that changed value since last seen; return fights this extends.
        `paths` None: the object's tracked paths are `paths_of(key)`, asked only when a value is read."""
        now = self._clock()
        with self._lock:
            hist = self._objects.get(key)
            if hist is None and self._paths_of is not None:
                self._objects[key] = _ObjectHistory(first=(live, now))
                return []
            if hist is None:
                hist = self._objects[key] = _ObjectHistory()
            tracked = list(self._tracked(key) if paths is None else paths)
            self._read_first(key, hist, tracked)
            return self._observe_locked(key, hist, tracked, live, now)

    def _tracked(self, key: ObjectKey) -> Iterable[str]:
        if self._paths_of is None:
            raise ValueError("OwnershipHistory.observe: no paths given, and no paths_of to ask")
        return self._paths_of(key)

    def _read_first(self, key: ObjectKey, hist: _ObjectHistory, paths: Iterable[str] | None = None) -> None:
        """Record the values of the object's first sight, if it was kept unread (`paths_of`)."""
        if hist.first is None:
            return
        live, seen = hist.first
        hist.first = None
        self._observe_locked(key, hist, self._tracked(key) if paths is None else paths, live, seen)

    def _observe_locked(
        self, key: ObjectKey, hist: _ObjectHistory, paths: Iterable[str], live: Manifest, now: float
    ) -> list[Fight]:
        rv = resource_version(live)
        found: list[Fight] = []
        entries: list[ownership.ManagedFieldsEntry] | None = None  # read once, when a field changed
        for path in paths:
            parsed, text = _parsed(path)
            value = fieldpath.get(live, parsed)
            value = None if value is fieldpath.MISSING else value
            if is_secret(key) and value is not None:
                value = MASK
            seen = hist.fields.get(path)
            if type(seen) is FieldRecord:
                if seen.value == value:
                    continue
                seen = hist.fields[path] = _FieldHistory([seen])
            elif seen is not None and seen.records and seen.records[-1].value == value:  # type: ignore[union-attr]
                continue
            if entries is None:
                entries = ownership.managed_fields(live)
            record = _record(live, entries, parsed, text, value, now, rv)
            if seen is None:  # the first value: nothing to fight over yet
                hist.fields[path] = record
                continue
            fh: _FieldHistory = seen  # type: ignore[assignment]
            fh.records.append(record)
            if len(fh.records) > self._max:
                del fh.records[0]
            fight = self._fight_locked(key, path, fh, now)
            if fight is not None:
                found.append(fight)
        return found

    def forget(self, keys: Iterable[ObjectKey]) -> None:
        """Drop objects that left the desired set."""
        gone = set(keys)
        with self._lock:
            for key in gone:
                self._objects.pop(key, None)
            # One scan of the fights for all keys (a scan per key was quadratic when a revision drops many)
            for fk in [fk for fk in self._fights if fk[0] in gone]:
                del self._fights[fk]

    def fights(self) -> list[Fight]:
        with self._lock:
            cutoff = self._clock() - self._window
            return [f for f in self._fights.values() if f.records and f.records[-1].observed >= cutoff]

    def fields(self, key: ObjectKey) -> dict[str, list[FieldRecord]]:
        with self._lock:
            hist = self._objects.get(key)
            if hist is None:
                return {}
            self._read_first(key, hist)
            return {p: _records(fh) for p, fh in hist.fields.items()}

    def to_dict(self, *, changed_only: bool = True) -> list[dict[str, Any]]:
        """For /status: per object, per field, the recorded values and owners (oldest first).

        By default only fields that changed at least once (two records or more): a field seen once has no
        history worth reading, and listing every field of 10,000 objects made /status a 40 MB document
        that took the daemon's peak memory past 370 MB. `changed_only=False` gives everything.
        """
        least = 2 if changed_only else 1
        with self._lock:
            out = []
            for key in sorted(self._objects):
                hist = self._objects[key]
                if hist.first is not None:
                    if changed_only:  # one sight so far: one record per field
                        continue
                    self._read_first(key, hist)
                fields = {
                    p: [r.to_dict() for r in records]
                    for p, records in sorted((p, _records(fh)) for p, fh in self._objects[key].fields.items())
                    if len(records) >= least
                }
                if fields or not changed_only:
                    out.append(
                        {
                            "kind": key.kind,
                            "group": key.group,
                            "namespace": key.namespace,
                            "name": key.name,
                            "fields": fields,
                        }
                    )
            return out

    # -- fight detection --------------------------------------------------------------------

    def _fight_locked(self, key: ObjectKey, path: str, fh: _FieldHistory, now: float) -> Fight | None:
        recent = [r for r in fh.records if r.observed >= now - self._window]
        if not is_fight([r.manager for r in recent], self._min_takes):
            fh.fight_size = 0
            self._fights.pop((key, path), None)
            return None
        if len(recent) == fh.fight_size:
            return None
        fh.fight_size = len(recent)
        fight = Fight(key, path, recent)
        self._fights[(key, path)] = fight
        return fight


def is_fight(managers: list[str], min_takes: int = 2) -> bool:
    """At least two managers that each took the field `min_takes` times, alternating with another."""
    runs: list[str] = []
    for m in managers:
        if not runs or runs[-1] != m:
            runs.append(m)
    takes: dict[str, int] = {}
    for m in runs:
        takes[m] = takes.get(m, 0) + 1
    return sum(1 for n in takes.values() if n >= min_takes) >= 2


@functools.lru_cache(maxsize=8192)
def _parsed(path: str) -> tuple[fieldpath.Path, str]:
    """A tracked path parsed, and spelled as managedFields spell it: once for all the objects that share it
    (every object of a template), not at every watch event of each."""
    parsed = fieldpath.parse(path)
    return parsed, parsed.format()


def _record(
    live: Manifest,
    entries: list[ownership.ManagedFieldsEntry],
    path: fieldpath.Path,
    text: str,
    value: Any,
    now: float,
    rv: str,
) -> FieldRecord:
    holders = ownership.owners_among(entries, live, path, text)
    # After a change the writer is (normally) the only owner; with shared owners, the most recent one.
    writer = max(holders, key=lambda e: e.time, default=None)
    return FieldRecord(
        value=value,
        manager=writer.manager if writer else "",
        operation=writer.operation if writer else "",
        subresource=writer.subresource if writer else "",
        time=writer.time if writer else "",
        observed=now,
        resource_version=rv,
        owners=_shared_owners(tuple(sorted({e.manager for e in holders}))),
    )


# The few sets of owners every field of every object has (("gitops-sync",) mostly): one tuple each, not one per
# record (0.4 kB per object at 6,000 objects, tracemalloc). Bounded: past it, records keep their own.
_OWNERS: dict[tuple[str, ...], tuple[str, ...]] = {}
_OWNERS_MAX = 4096


def _shared_owners(owners: tuple[str, ...]) -> tuple[str, ...]:
    shared = _OWNERS.get(owners)
    if shared is None and len(_OWNERS) < _OWNERS_MAX:
        shared = _OWNERS.setdefault(owners, owners)
    return shared or owners


def _clock(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(epoch))
