"""Reading plain-dict objects along paths: every leaf with its path, the value at a path, removal.

`leaves` names every field a desired object sets, list items addressed as the server does (`listkeys.py`);
`get` looks each one up in the live object. That pair is the per-leaf comparison of every object in a plan
(`plan/diff.py`, the no-request fast path of a no-op sync), so `get` must not allocate in the common case.
`remove` gives the apply bodies without contested fields (`plan/planner.py`).

Printed paths split dotted map keys into several `Field`s (see `notation.py`): `get`, `remove` and
`resolve` re-join them against the object they walk, exact keys first, longer joins on a miss.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

from gitops_sync.plan.fieldpath.element import Field, Index, Key, Path, PathElement, Value, canonical_json
from gitops_sync.plan.fieldpath.listkeys import SET, item_key, key_matches, list_keys
from gitops_sync.plan.fieldpath.notation import parse

__all__ = ["MISSING", "Missing", "Step", "get", "leaf_paths", "leaves", "remove", "resolve"]


class _Missing(enum.Enum):
    MISSING = "MISSING"

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing.MISSING
"""Absent field: distinct from an explicit JSON `null` (None)."""

Missing: TypeAlias = Literal[_Missing.MISSING]

Step: TypeAlias = str | int

# Never Mappings: the ABC check (`isinstance(x, Mapping)`, a Python-level call) is skipped for these.
_PLAIN: Final = frozenset({str, int, float, bool, type(None), list})


def _is_map(node: Any) -> bool:
    """`isinstance(node, Mapping)`, answered without the ABC machinery for JSON's own types."""
    cls = type(node)
    return cls is dict or (cls not in _PLAIN and isinstance(node, Mapping))


def _as_path(path: Path | str) -> Path:
    return parse(path) if isinstance(path, str) else path


def _find(node: Any, elements: Sequence[PathElement], i: int) -> list[tuple[Step, int]] | None:
    """How to reach `elements[i:]` in `node`: (dict key or list index, elements consumed) pairs."""
    if i == len(elements):
        return []
    element = elements[i]
    if isinstance(element, Field):
        if not isinstance(node, Mapping):
            return None
        run_end = i
        while run_end < len(elements) and isinstance(elements[run_end], Field):
            run_end += 1
        # Exact element first, then re-join dot-split pieces of a key such as `app.kubernetes.io/name`.
        for j in range(i + 1, run_end + 1):
            name = ".".join(e.name for e in elements[i:j] if isinstance(e, Field))
            if name in node:
                rest = _find(node[name], elements, j)
                if rest is not None:
                    return [(name, j - i), *rest]
        return None
    if not isinstance(node, list):
        return None
    index: int | None = None
    if isinstance(element, Index):
        index = element.index if 0 <= element.index < len(node) else None
    elif isinstance(element, Key):
        index = next((n for n, item in enumerate(node) if key_matches(item, element)), None)
    else:
        index = next((n for n, item in enumerate(node) if canonical_json(item) == element.json), None)
    if index is None:
        return None
    rest = _find(node[index], elements, i + 1)
    return None if rest is None else [(index, 1), *rest]


def _follow(obj: Any, steps: Sequence[tuple[Step, int]]) -> Any:
    for step, _ in steps:
        obj = obj[step]
    return obj


def get(obj: Any, path: Path | str) -> Any:
    """The value at `path`, or `MISSING`; list items found by key fields, value or index."""
    elements = _as_path(path)
    found = _get_direct(obj, elements)
    if found is not MISSING:
        return found
    steps = _find(obj, elements, 0)
    return MISSING if steps is None else _follow(obj, steps)


def _get_direct(node: Any, elements: Sequence[PathElement]) -> Any:
    """The route `_find` tries first (each Field as one map key, the first matching list item), without
    building it: MISSING when it fails, and then `_find` also tries dot-split keys re-joined. Every leaf of
    every object is looked up this way when planning, so the common case must not allocate."""
    for element in elements:
        if isinstance(element, Field):
            if not _is_map(node) or element.name not in node:
                return MISSING
            node = node[element.name]
            continue
        if not isinstance(node, list):
            return MISSING
        if isinstance(element, Index):
            if not 0 <= element.index < len(node):
                return MISSING
            node = node[element.index]
        elif isinstance(element, Key):
            node = next((item for item in node if key_matches(item, element)), MISSING)
        else:
            node = next((item for item in node if canonical_json(item) == element.json), MISSING)
        if node is MISSING:
            return MISSING
    return node


def resolve(obj: Any, path: Path | str) -> Path | None:
    """`path` with dot-split map keys re-joined as they exist in `obj`; None when absent."""
    elements = _as_path(path)
    steps = _find(obj, elements, 0)
    if steps is None:
        return None
    out: list[PathElement] = []
    i = 0
    for step, consumed in steps:
        out.append(Field(step) if isinstance(step, str) else elements[i])
        i += consumed
    return Path(out)


def remove(obj: Any, path: Path | str) -> Any:
    """A deep copy of `obj` without the field at `path` (unchanged copy when it is absent).

    A key field of an associative-list item is kept: the item cannot be named without it, so
    removing `[name="api"].name` leaves the item whole while `[name="api"].image` drops only the image.
    Maps and lists left empty by the removal go too (list items stay, named by their keys).
    """
    out = copy.deepcopy(obj)
    elements = _as_path(path)
    steps = _find(out, elements, 0)
    if not steps:
        return out
    parent = _follow(out, steps[:-1])
    last = steps[-1][0]
    if isinstance(parent, Mapping) and len(elements) >= 2 and isinstance(elements[-2], Key):
        key_names = {name for name, _ in elements[-2].items}
        if last in key_names:
            return out
    del parent[last]
    # Drop the maps and lists this removal emptied, up to the nearest list item: an apply body with
    # `labels: {}` left over would claim a node we no longer set anything in.
    for depth in range(len(steps) - 1, 0, -1):
        node = _follow(out, steps[:depth])
        container = _follow(out, steps[: depth - 1])
        if node or isinstance(container, list):
            break
        del container[steps[depth - 1][0]]
    return out


def leaves(obj: Mapping[str, Any]) -> Iterator[tuple[Path, Any]]:
    """Every leaf of a desired object with its value, list items addressed as the server does.

    Leaves are scalars, empty maps, atomic lists (whole) and set elements; key fields of an
    associative-list item are leaves of that item (the server tracks them as `f:name` too).
    """
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else None
    out: list[tuple[Path, Any]] = []
    _walk(obj, Path(), kind, out)
    yield from out


def _walk(node: Any, path: Path, kind: str | None, out: list[tuple[Path, Any]]) -> None:
    """Appends to `out` rather than yielding: a generator per level costs every leaf one resume per level."""
    if _is_map(node):
        if not node and path:
            out.append((path, node))
        for name, value in node.items():
            _walk(value, path.child(Field(str(name))), kind, out)
        return
    if isinstance(node, list) and node:
        keys = list_keys(path, node, kind)
        if keys == SET:
            for item in node:
                out.append((path.child(Value.of(item)), item))
            return
        if isinstance(keys, tuple):
            for item in node:
                _walk(item, path.child(item_key(item, keys)), kind, out)
            return
    out.append((path, node))


def leaf_paths(obj: Mapping[str, Any]) -> list[str]:
    """The fields an apply of `obj` sets, in server notation (comparable with owned paths)."""
    return [path.format() for path, _ in leaves(obj)]
