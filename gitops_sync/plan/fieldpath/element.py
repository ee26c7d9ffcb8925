"""Path elements and the `Path` made of them, as structured-merge-diff's `PathElement` and `Path`.

Four kinds of step: `.name` (a field or map key), `[k=v,...]` (an associative-list item by its key
fields), `[=v]` (a set element), `[n]` (an atomic-list position). Each prints itself in the server's
notation (`format`); `notation.py` reads that notation back, `fieldsv1.py` decodes managedFields into
these elements, and `walk.py` follows them through objects. Key and set values are held as canonical
JSON so elements hash and compare exactly.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from gitops_sync.plan.fieldpath.goformat import to_string

__all__ = ["Field", "Index", "Key", "Path", "PathElement", "Value", "canonical_json"]


def canonical_json(value: Any) -> str:
    """One spelling per JSON value, so key fields and set values compare and hash as strings.

    Integral floats collapse to ints: YAML `80` and a decoded `80.0` name the same list item. Strings and
    ints (nearly every key: a name, a port) are spelt as json.dumps spells them without its encoder set-up:
    it was a third of a no-op sync's comparison time (tests/unit/plan/fieldpath/test_fieldpath_canonical_json.py).
    """
    cls = type(value)
    if cls is str:
        return _encode_str(value)
    if cls is int:
        return int.__repr__(value)
    return json.dumps(_integral(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_encode_str = json.encoder.encode_basestring  # json.dumps(s, ensure_ascii=False), C accelerated


def _integral(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_integral(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Field:
    """`.name`: a struct field or a map key."""

    name: str

    def format(self) -> str:
        return "." + self.name


@dataclass(frozen=True, slots=True)
class Key:
    """`[k=v,...]`: the item of an associative list whose key fields have these values.

    Values are held as canonical JSON (hashable, exact); fields are sorted by name as the server sorts.
    """

    items: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, fields: Mapping[str, Any]) -> Key:
        return cls(tuple(sorted((name, canonical_json(v)) for name, v in fields.items())))

    @property
    def fields(self) -> dict[str, Any]:
        return {name: json.loads(v) for name, v in self.items}

    def format(self) -> str:
        return _format_key(self.items)


@dataclass(frozen=True, slots=True)
class Value:
    """`[=v]`: the element of a set (a list with `listType=set`)."""

    json: str

    @classmethod
    def of(cls, value: Any) -> Value:
        return cls(canonical_json(value))

    @property
    def value(self) -> Any:
        return json.loads(self.json)

    def format(self) -> str:
        return _format_value(self.json)


@dataclass(frozen=True, slots=True)
class Index:
    """`[n]`: a position in an atomic list."""

    index: int

    def format(self) -> str:
        return f"[{self.index}]"


PathElement: TypeAlias = Field | Key | Value | Index


# A key or set element is spelled again for every leaf below it and for every object of a template (the
# daemon's tracked paths of 20,000 objects: ~10 s, most of it decoding these values to spell them): once each.
@functools.lru_cache(maxsize=8192)
def _format_key(items: tuple[tuple[str, str], ...]) -> str:
    return "[" + ",".join(f"{name}={to_string(json.loads(v))}" for name, v in items) + "]"


@functools.lru_cache(maxsize=8192)
def _format_value(value_json: str) -> str:
    return f"[={to_string(json.loads(value_json))}]"


class Path(tuple[PathElement, ...]):
    """A parsed field path; `str()`/`format()` give the server's notation back."""

    __slots__ = ()

    def __new__(cls, elements: Iterable[PathElement] = ()) -> Path:
        return super().__new__(cls, elements)

    @classmethod
    def parse(cls, text: str) -> Path:
        # Imported here: the reader builds Paths, so notation.py imports this module.
        from gitops_sync.plan.fieldpath.notation import parse

        return parse(text)

    def format(self) -> str:
        return "".join(e.format() for e in self)

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"Path({self.format()!r})"

    def child(self, *elements: PathElement) -> Path:
        # tuple.__new__ directly: one Python frame less per leaf of every object walked (walk.py).
        return tuple.__new__(Path, (*self, *elements))

    @property
    def parent(self) -> Path:
        return Path(self[:-1])

    def prefixes(self) -> Iterator[Path]:
        """Strict ancestors, nearest first (root excluded)."""
        for n in range(len(self) - 1, 0, -1):
            yield Path(self[:n])

    def startswith(self, other: Sequence[PathElement]) -> bool:
        return len(other) <= len(self) and tuple(self[: len(other)]) == tuple(other)
