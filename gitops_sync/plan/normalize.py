"""Make desired and live objects comparable: drop what the server fills in, and accept its spellings.

A diff must show only what Git and the cluster disagree on. The server adds bookkeeping
(`status`, `managedFields`, `resourceVersion`, ...), folds Secret `stringData` into `data`, and
rewrites quantities (`0.5` is stored as `500m`); none of that is a difference.
"""

from __future__ import annotations

import base64
import copy
import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from gitops_sync.conventions import SERVER_ANNOTATIONS, SERVER_METADATA
from gitops_sync.errors import RenderError
from gitops_sync.plan.fieldpath import MISSING, Field, Path, PathElement, parse
from gitops_sync.resource import Manifest, ObjectKey, is_secret

__all__ = [
    "copy_json",
    "equivalent",
    "is_quantity_path",
    "parse_quantity",
    "prepare_desired",
    "same_quantity",
    "strip_server_fields",
]


def strip_server_fields(obj: Manifest) -> Manifest:
    """A copy without what the server fills in (status, bookkeeping metadata, kubectl annotations).

    An annotations map left empty is dropped too: it existed only for the server's annotations.
    Only the top level, `metadata` and its `annotations` are copied (a deep copy of every live object
    dominated a no-op plan); the rest is shared with `obj`, so treat the result as read-only.
    """
    out = dict(obj)
    out.pop("status", None)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta = out["metadata"] = dict(meta)
        for name in SERVER_METADATA:
            meta.pop(name, None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations = meta["annotations"] = dict(annotations)
            for name in SERVER_ANNOTATIONS:
                annotations.pop(name, None)
            if not annotations:
                del meta["annotations"]
    return out


_ATOMS: Final = frozenset({str, int, float, bool, type(None)})


def copy_json(node: Any) -> Any:
    """A deep copy of a JSON-shaped value (dicts, lists, scalars): 4x faster than copy.deepcopy, which
    keeps a memo for shared and cyclic references that YAML- and JSON-decoded objects never have (an
    aliased YAML node is copied twice, which is what an apply body needs anyway). Anything else: deepcopy."""
    cls = type(node)
    if cls is dict:
        return {k: copy_json(v) for k, v in node.items()}
    if cls is list:
        return [copy_json(v) for v in node]
    if cls in _ATOMS:
        return node
    return copy.deepcopy(node)


def prepare_desired(obj: Manifest) -> Manifest:
    """A copy ready to apply and to compare with live objects.

    Secret `stringData` is folded into base64 `data` as the server does (a `stringData` key wins
    over the same `data` key), so ownership and comparison track `data`, the field the server stores;
    empty `labels`/`annotations` maps are dropped (the server does not keep them); `status` is removed
    (an apply to the main resource ignores it).
    """
    out: Manifest = copy_json(obj)
    out.pop("status", None)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for name in ("labels", "annotations"):
            if name in meta and not meta[name]:
                del meta[name]
    if is_secret(out) and "stringData" in out:
        string_data = out.pop("stringData") or {}
        data = dict(out.get("data") or {})
        for name, value in string_data.items():
            if not isinstance(value, str):
                raise RenderError(
                    f"stringData.{name} must be a string, not {type(value).__name__}",
                    obj=str(ObjectKey.of(out)),
                )
            data[name] = base64.b64encode(value.encode()).decode("ascii")
        out["data"] = data
    return out


# --- quantities ------------------------------------------------------------------------------------

_QUANTITY_RE: Final = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)
_SUFFIXES: Final[dict[str, Decimal]] = {
    "": Decimal(1),
    **{s: Decimal(1024) ** (n + 1) for n, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: Decimal(10) ** e for s, e in (("n", -9), ("u", -6), ("m", -3), ("k", 3), ("M", 6), ("G", 9))},
    **{s: Decimal(10) ** e for s, e in (("T", 12), ("P", 15), ("E", 18))},
}


def parse_quantity(value: str | int | float) -> Decimal:
    """The exact value of a resource.Quantity (`500m`, `1Gi`, `1e3`, `2`); ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY_RE.match(value.strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    number, exponent, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as err:
        raise ValueError(f"not a quantity: {value!r}") from err
    if exponent:
        return base.scaleb(int(exponent[1:]))
    return base * _SUFFIXES[suffix or ""]


def same_quantity(a: str | int | float, b: str | int | float) -> bool:
    """`500m` == `0.5`, `1Gi` == `1024Mi`, `1` == 1: the server stores the canonical spelling."""
    try:
        return parse_quantity(a) == parse_quantity(b)
    except ValueError:
        return False


# Fields whose values (maps of) are quantities: container/PVC resources, quotas, limit ranges,
# PV capacity, emptyDir sizeLimit.
_QUANTITY_PARENTS: Final = frozenset(
    {"resources", "limits", "requests", "hard", "used", "capacity", "allocatable", "overhead"}
)
_QUANTITY_FIELDS: Final = frozenset({"sizeLimit"})


def is_quantity_path(path: Path | str | Sequence[PathElement]) -> bool:
    """Whether the value at `path` is a resource quantity (so `500m` and `0.5` are the same)."""
    elements = parse(path) if isinstance(path, str) else path
    names = [e.name for e in elements if isinstance(e, Field)]
    if names and names[-1] in _QUANTITY_FIELDS:
        return True
    return any(name in _QUANTITY_PARENTS for name in names[:-1])


def equivalent(desired: Any, live: Any, path: Path | str | Sequence[PathElement] = ()) -> bool:
    """Whether the live value is what the server makes of the desired one.

    Equal: numbers by value (1 == 1.0); quantities by value where `path` is a quantity field;
    an absent live field for a desired null or empty map/list (the server omits them); maps where
    every desired key is equivalent (extra live keys are server defaults inside atomic values).
    Not equal: a string and a number (intOrString `"80"` vs 80), a bool and a number.
    """
    elements = parse(path) if isinstance(path, str) else tuple(path)
    return _equivalent(desired, live, list(elements))


def _equivalent(desired: Any, live: Any, path: list[PathElement]) -> bool:
    desired_absent = desired is MISSING or desired is None
    live_absent = live is MISSING or live is None
    if desired_absent or live_absent:
        empty = isinstance(desired, dict | list) and not desired
        return live_absent and (desired_absent or empty)
    if isinstance(desired, bool) or isinstance(live, bool):
        return isinstance(desired, bool) and isinstance(live, bool) and desired == live
    scalar = (str, int, float)
    if isinstance(desired, scalar) and isinstance(live, scalar) and path and is_quantity_path(path):
        return desired == live or same_quantity(desired, live)
    if isinstance(desired, int | float) and isinstance(live, int | float):
        return desired == live
    if isinstance(desired, dict) and isinstance(live, dict):
        return all(_equivalent(v, live.get(k, MISSING), [*path, Field(str(k))]) for k, v in desired.items())
    if isinstance(desired, list) and isinstance(live, list):
        return len(desired) == len(live) and all(_equivalent(d, lv, path) for d, lv in zip(desired, live, strict=True))
    return type(desired) is type(live) and bool(desired == live)
