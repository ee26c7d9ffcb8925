"""Field-level differences between objects, with paths in the API server's notation.

Two comparisons, for two questions:

- `diff_objects(result, live)`: what would change? Compares two server-shaped objects (a dry-run
  apply result and the live object) everywhere, after dropping server bookkeeping.
- `diff_intent(desired, live)`: does the cluster still hold what we set? Looks only at the leaves
  of our manifest; fields others set and we do not are none of our business.

Lists are compared item by item where the server merges them by key, else as one atomic value.
The merge keys (`fieldpath.MERGE_KEYS`, `fieldpath.list_keys`):

| list | key |
|---|---|
| containers, initContainers, ephemeralContainers | name |
| env, volumes, imagePullSecrets | name |
| volumeMounts / volumeDevices | mountPath / devicePath |
| container `ports` | containerPort + protocol (protocol defaults to "TCP") |
| Service `.spec.ports` | port + protocol (protocol defaults to "TCP") |
| `.metadata.finalizers` | set (`[="x"]`) |
| ownerReferences | uid |
| conditions | type |
| hostAliases | ip |
| topologySpreadConstraints | topologyKey + whenUnsatisfiable |
| tolerations, envFrom, args, command, readinessGates | atomic |
| any other list of maps with unique string `name` | name |
| anything else | atomic |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gitops_sync.plan.fieldpath import (
    MISSING,
    SET,
    Field,
    Key,
    Path,
    Value,
    get,
    item_key,
    leaves,
    list_keys,
)
from gitops_sync.plan.normalize import equivalent, prepare_desired, strip_server_fields
from gitops_sync.resource import Manifest

__all__ = ["FieldDiff", "diff_intent", "diff_objects"]

# Identity, not content: a live object read at another version differs here without drifting.
_IDENTITY = frozenset({Path((Field("apiVersion"),)), Path((Field("kind"),))})


@dataclass(frozen=True)
class FieldDiff:
    """One differing field; `desired`/`live` are `fieldpath.MISSING` when absent (distinct from null)."""

    path: str
    desired: Any
    live: Any

    @property
    def in_desired(self) -> bool:
        return self.desired is not MISSING

    @property
    def in_live(self) -> bool:
        return self.live is not MISSING

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: absent values as null, so a report reader sees `null` for "not there"."""
        return {
            "path": self.path,
            "desired": None if self.desired is MISSING else self.desired,
            "live": None if self.live is MISSING else self.live,
        }


def diff_objects(desired: Manifest, live: Manifest) -> list[FieldDiff]:
    """Every difference between two server-shaped objects, server bookkeeping excluded.

    A field on one side only is reported with `MISSING` on the other; a list item on one side only
    is reported whole at its key path (`...containers[name="sidecar"]`).
    """
    a, b = strip_server_fields(desired), strip_server_fields(live)
    kind = a.get("kind") or b.get("kind")
    out: list[FieldDiff] = []
    _compare(a, b, Path(), kind if isinstance(kind, str) else None, out)
    return out


def _compare(x: Any, y: Any, path: Path, kind: str | None, out: list[FieldDiff]) -> None:
    if x is MISSING or y is MISSING:
        if x is not y:
            out.append(FieldDiff(path.format(), x, y))
        return
    if isinstance(x, Mapping) and isinstance(y, Mapping):
        for name in [*x, *(k for k in y if k not in x)]:
            _compare(x.get(name, MISSING), y.get(name, MISSING), path.child(Field(str(name))), kind, out)
        return
    if isinstance(x, list) and isinstance(y, list) and x and y:
        keys = list_keys(path, x, kind)
        if keys is not None and keys == list_keys(path, y, kind):
            if keys == SET:
                _compare_sets(x, y, path, out)
            else:
                _compare_keyed(x, y, path, kind, tuple(keys), out)
            return
    if not _same(x, y):
        out.append(FieldDiff(path.format(), x, y))


def _compare_sets(x: list[Any], y: list[Any], path: Path, out: list[FieldDiff]) -> None:
    xs, ys = {Value.of(v): v for v in x}, {Value.of(v): v for v in y}
    out.extend(FieldDiff(path.child(e).format(), v, MISSING) for e, v in xs.items() if e not in ys)
    out.extend(FieldDiff(path.child(e).format(), MISSING, v) for e, v in ys.items() if e not in xs)


def _compare_keyed(
    x: list[Any], y: list[Any], path: Path, kind: str | None, keys: tuple[str, ...], out: list[FieldDiff]
) -> None:
    xs: dict[Key, Any] = {item_key(i, keys): i for i in x}
    ys: dict[Key, Any] = {item_key(i, keys): i for i in y}
    common_x = [k for k in xs if k in ys]
    common_y = [k for k in ys if k in xs]
    if common_x != common_y:  # same items, new order: the stored list changes as a whole
        out.append(FieldDiff(path.format(), x, y))
    for key in [*xs, *(k for k in ys if k not in xs)]:
        _compare(xs.get(key, MISSING), ys.get(key, MISSING), path.child(key), kind, out)


def _same(x: Any, y: Any) -> bool:
    """JSON equality: numbers by value, but a bool is never a number."""
    if isinstance(x, bool) or isinstance(y, bool):
        return isinstance(x, bool) and isinstance(y, bool) and x == y
    if isinstance(x, int | float) and isinstance(y, int | float):
        return x == y
    if isinstance(x, Mapping) and isinstance(y, Mapping):
        return x.keys() == y.keys() and all(_same(v, y[k]) for k, v in x.items())
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y, strict=True))
    return type(x) is type(y) and bool(x == y)


def diff_intent(desired: Manifest, live: Manifest, *, prepared: bool = False) -> list[FieldDiff]:
    """Differences at the leaves of `desired` only; empty = every field we set holds its value live.

    `desired` is prepared first (Secret `stringData` compared as `data`) unless `prepared` says it already
    is (a planner Target's apply body); values are compared with `normalize.equivalent` so the server's own
    spellings (quantities, 1 vs 1.0) are not drift.
    """
    want = strip_server_fields(desired if prepared else prepare_desired(desired))
    if _holds_all(want, live):  # the common answer, from one walk of both objects together
        return []
    out = []
    for path, value in leaves(want):
        if path in _IDENTITY:
            continue
        live_value = get(live, path)
        if not equivalent(value, live_value, path):
            out.append(FieldDiff(path.format(), value, live_value))
    return out


def _holds_all(want: Manifest, live: Manifest) -> bool:
    """True only when `diff_intent` would find nothing; False on any doubt (then the leaf-by-leaf look-ups
    decide and say where). Walks `want` and `live` together: a leaf costs one step from its parent instead of
    a look-up from the root, and equal scalars skip `equivalent` (no quantity check of the path).
    No-op plan of 5,000 objects: diff_intent 1.30 s -> see the commit message (profiled)."""
    kind = want.get("kind") if isinstance(want.get("kind"), str) else None
    if type(live) is not dict:
        return False
    for name, value in want.items():
        if name in ("apiVersion", "kind"):  # _IDENTITY
            continue
        if type(name) is not str or name not in live or not _holds(value, live[name], Path((Field(name),)), kind):
            return False
    return True


_SCALARS = (str, int, bool)


def _holds(want: Any, live: Any, path: Path, kind: str | None) -> bool:
    cls = type(want)
    if cls is dict:
        if not want:
            return equivalent(want, live, path)  # an empty map is a leaf
        if type(live) is not dict:
            return False
        for name, value in want.items():
            if type(name) is not str or name not in live:
                return False  # absent (or a dot-split key): the look-ups know what that means
            if not _holds(value, live[name], path.child(Field(name)), kind):
                return False
        return True
    if cls is list and want:
        keys = list_keys(path, want, kind)
        if keys == SET:
            return type(live) is list and set(want) <= {v for v in live if type(v) is str}
        if isinstance(keys, tuple):
            if type(live) is not list:
                return False
            for item in want:
                key = item_key(item, keys)
                found = get(live, Path((key,)))  # the first item the key names, as the look-ups find it
                if found is MISSING or not _holds(item, found, path.child(key), kind):
                    return False
            return True
    if cls in _SCALARS and type(live) is cls and want == live:
        return True
    return equivalent(want, live, path)
