"""How the server merges a list: by key fields (`[name="api"]`), as a set (`[="x"]`), or whole (atomic).

We have no OpenAPI schema at hand, so the `+listMapKey` markers of the common built-in lists are kept
here, with the `name` convention for other lists of named maps. `walk.py` uses these rules to name
list items while it walks an object, and `plan/diff.py` to compare lists item by item.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from gitops_sync.plan.fieldpath.element import Field, Key, Path, canonical_json

__all__ = ["ATOMIC_LISTS", "MERGE_KEYS", "SET", "item_key", "key_matches", "list_keys"]

SET: Final = "set"
"""`list_keys` result for a list of scalars merged as a set (`[="x"]`)."""

# Key fields the server defaults before identifying an item: a desired port without `protocol`
# is the live item with `protocol: TCP`.
_KEY_DEFAULTS: Final[dict[str, Any]] = {"protocol": "TCP"}

_CONTAINER_LISTS: Final = frozenset({"containers", "initContainers", "ephemeralContainers"})

# The merge keys of common built-in lists (k8s.io/api `+listMapKey` markers). Looked up by the
# list's field name; `ports` and `finalizers` depend on where they are (see `list_keys`).
MERGE_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "imagePullSecrets": ("name",),
    "ownerReferences": ("uid",),
    "conditions": ("type",),
    "hostAliases": ("ip",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
}
# Lists the server replaces whole even though their items would match the `name` heuristic.
ATOMIC_LISTS: Final = frozenset({"tolerations", "envFrom", "args", "command", "readinessGates"})


def list_keys(path: Path, items: Sequence[Any], kind: str | None = None) -> tuple[str, ...] | str | None:
    """How the server merges the list at `path`: key field names, `SET`, or None (atomic).

    `kind` is the root object's kind (Service `.spec.ports` differs from other `ports`). A rule only
    applies when every item carries its keys and they are unique; else the list is atomic, which
    is what the server does for lists without a schema.
    """
    name = path[-1].name if path and isinstance(path[-1], Field) else ""
    if name in ATOMIC_LISTS:
        return None
    if name == "finalizers" and path == (Field("metadata"), Field("finalizers")):
        return SET if all(isinstance(i, str) for i in items) and len(set(items)) == len(items) else None
    keys: tuple[str, ...] | None = MERGE_KEYS.get(name)
    if name == "ports":
        in_container = len(path) >= 3 and isinstance(path[-2], Key) and path[-3] in _CONTAINER_FIELDS
        if in_container:
            keys = ("containerPort", "protocol")
        elif kind in (None, "Service") and path == (Field("spec"), Field("ports")):
            keys = ("port", "protocol")
    named = all(isinstance(i, Mapping) and isinstance(i.get("name"), str) for i in items)
    if keys is None and items and named:
        keys = ("name",)  # unknown list of named items: the convention most schemas follow
    if keys is None or not _keys_usable(items, keys):
        return None
    return keys


_CONTAINER_FIELDS: Final = frozenset(Field(n) for n in _CONTAINER_LISTS)


def _keys_usable(items: Sequence[Any], keys: tuple[str, ...]) -> bool:
    seen: set[Key] = set()
    for item in items:
        if not isinstance(item, Mapping) or any(k not in item and k not in _KEY_DEFAULTS for k in keys):
            return False
        seen.add(item_key(item, keys))
    return len(seen) == len(items)


def item_key(item: Mapping[str, Any], keys: Sequence[str]) -> Key:
    """The `[k=v,...]` element naming `item`, with server-defaulted key fields filled in."""
    return Key.of({k: item[k] if k in item else _KEY_DEFAULTS.get(k) for k in keys})


def key_matches(item: Any, key: Key) -> bool:
    """Whether `item` is the list item `key` names, server-defaulted key fields included."""
    if not isinstance(item, Mapping):
        return False
    for name, want in key.items:
        if name in item:
            if canonical_json(item[name]) != want:
                return False
        elif name not in _KEY_DEFAULTS or canonical_json(_KEY_DEFAULTS[name]) != want:
            return False
    return True
