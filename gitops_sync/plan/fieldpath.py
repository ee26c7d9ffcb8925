"""Field paths in the API server's own notation, and lookups on plain-dict objects.

The server prints a path as in SSA conflict messages (structured-merge-diff `Path.String()`):
`.spec.replicas`, `.spec.template.spec.containers[name="api"].image`,
`.spec.ports[port=80,protocol="TCP"].targetPort`, `.metadata.finalizers[="a"]`, `.spec.args[0]`.
Keeping that notation end to end means a conflict path from a 409, a path from `managedFields`
and a path from our own diff compare as plain strings, and users see what `kubectl` shows them.

Map keys are printed verbatim (`.metadata.labels.app.kubernetes.io/name`), so a printed path is
ambiguous where keys contain dots: `parse` splits on every dot, and `get`/`remove`/`resolve`
re-join the pieces against the object they walk (exact keys first, longer joins on a miss).
"""

from __future__ import annotations

import copy
import enum
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

__all__ = [
    "MISSING",
    "SET",
    "Field",
    "Index",
    "Key",
    "Missing",
    "Path",
    "PathElement",
    "Value",
    "canonical_json",
    "format_path",
    "get",
    "go_unquote",
    "item_key",
    "leaf_paths",
    "leaves",
    "list_keys",
    "parse",
    "remove",
    "resolve",
]


class _Missing(enum.Enum):
    MISSING = "MISSING"

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing.MISSING
"""Absent field: distinct from an explicit JSON `null` (None)."""

Missing: TypeAlias = Literal[_Missing.MISSING]


def canonical_json(value: Any) -> str:
    """One spelling per JSON value, so key fields and set values compare and hash as strings.

    Integral floats collapse to ints: YAML `80` and a decoded `80.0` name the same list item.
    """
    return json.dumps(_integral(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _integral(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_integral(v) for v in value]
    return value


# --- path elements ------------------------------------------------------------------------------


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
        return "[" + ",".join(f"{name}={_to_string(json.loads(v))}" for name, v in self.items) + "]"


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
        return f"[={_to_string(self.value)}]"


@dataclass(frozen=True, slots=True)
class Index:
    """`[n]`: a position in an atomic list."""

    index: int

    def format(self) -> str:
        return f"[{self.index}]"


PathElement: TypeAlias = Field | Key | Value | Index


class Path(tuple[PathElement, ...]):
    """A parsed field path; `str()`/`format()` give the server's notation back."""

    __slots__ = ()

    def __new__(cls, elements: Iterable[PathElement] = ()) -> Path:
        return super().__new__(cls, elements)

    @classmethod
    def parse(cls, text: str) -> Path:
        return parse(text)

    def format(self) -> str:
        return "".join(e.format() for e in self)

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"Path({self.format()!r})"

    def child(self, *elements: PathElement) -> Path:
        return Path((*self, *elements))

    @property
    def parent(self) -> Path:
        return Path(self[:-1])

    def prefixes(self) -> Iterator[Path]:
        """Strict ancestors, nearest first (root excluded)."""
        for n in range(len(self) - 1, 0, -1):
            yield Path(self[:n])

    def startswith(self, other: Sequence[PathElement]) -> bool:
        return len(other) <= len(self) and tuple(self[: len(other)]) == tuple(other)


# --- printing values as Go's value.ToString does --------------------------------------------------

_GO_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}


def _go_quote(s: str) -> str:
    """strconv.Quote: what `%q` prints for string key values."""
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _go_float(f: float) -> str:
    """`%v` of a float64: integral values below 1e21 print without a fraction or exponent."""
    if math.isfinite(f) and f.is_integer() and abs(f) < 1e21:
        return str(int(f))
    text = repr(f)
    if "e" in text:
        mantissa, exp = text.split("e")
        sign = "-" if exp.startswith("-") else "+"
        text = f"{mantissa}e{sign}{int(exp.lstrip('+-')):02d}"
    return text


def _to_string(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_float(v)
    if isinstance(v, str):
        return _go_quote(v)
    if isinstance(v, list):
        return "[" + ",".join(_to_string(x) for x in v) + "]"
    if isinstance(v, dict):
        return "".join(f"{k}={_to_string(v[k])}" for k in sorted(v))
    raise TypeError(f"not a JSON value: {v!r}")


# --- parsing ---------------------------------------------------------------------------------------

_SIMPLE_ESCAPES: Final = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    '"': '"',
    "'": "'",
    "\\": "\\",
}
_HEX_WIDTH: Final = {"x": 2, "u": 4, "U": 8}


class _Parser:
    """Recursive-descent reader of the printed notation; errors name the offset."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> ValueError:
        return ValueError(f"invalid field path {self.text!r} at offset {self.pos}: {what}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise self.fail(f"expected {ch!r}")
        self.pos += 1

    def path(self) -> Path:
        elements: list[PathElement] = []
        while self.pos < len(self.text):
            ch = self.peek()
            if ch == ".":
                self.pos += 1
                start = self.pos
                while self.pos < len(self.text) and self.text[self.pos] not in ".[":
                    self.pos += 1
                elements.append(Field(self.text[start : self.pos]))
            elif ch == "[":
                elements.append(self.bracket())
            else:
                raise self.fail("expected '.' or '['")
        return Path(elements)

    def bracket(self) -> PathElement:
        self.expect("[")
        if self.peek() == "=":
            self.pos += 1
            element: PathElement = Value.of(self.literal())
            self.expect("]")
            return element
        end = self.text.find("]", self.pos)
        if end > self.pos and self.text[self.pos : end].isdigit():
            index = int(self.text[self.pos : end])
            self.pos = end + 1
            return Index(index)
        fields: dict[str, Any] = {}
        while True:
            eq = self.text.find("=", self.pos)
            if eq <= self.pos:
                raise self.fail("expected name=value")
            name = self.text[self.pos : eq]
            self.pos = eq + 1
            fields[name] = self.literal()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return Key.of(fields)

    def literal(self) -> Any:
        ch = self.peek()
        if ch == '"':
            return self.quoted()
        if ch == "[":
            self.pos += 1
            items: list[Any] = []
            while self.peek() != "]":
                items.append(self.literal())
                if self.peek() == ",":
                    self.pos += 1
                elif self.peek() != "]":
                    raise self.fail("expected ',' or ']'")
            self.pos += 1
            return items
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in ",]":
            self.pos += 1
        token = self.text[start : self.pos]
        if token in ("true", "false"):
            return token == "true"
        if token == "null":
            return None
        try:
            return int(token)
        except ValueError:
            pass
        try:
            return float(token)
        except ValueError:
            raise self.fail(f"unreadable value {token!r}") from None

    def quoted(self) -> str:
        """strconv.Unquote for a double-quoted Go string."""
        self.expect('"')
        out: list[str] = []
        while True:
            if self.pos >= len(self.text):
                raise self.fail("unterminated string")
            ch = self.text[self.pos]
            self.pos += 1
            if ch == '"':
                return "".join(out)
            if ch != "\\":
                out.append(ch)
                continue
            esc = self.peek()
            self.pos += 1
            if esc in _SIMPLE_ESCAPES:
                out.append(_SIMPLE_ESCAPES[esc])
            elif esc in _HEX_WIDTH:
                digits = self.text[self.pos : self.pos + _HEX_WIDTH[esc]]
                self.pos += _HEX_WIDTH[esc]
                out.append(chr(int(digits, 16)))
            elif esc.isdigit():
                digits = self.text[self.pos - 1 : self.pos + 2]
                self.pos += 2
                out.append(chr(int(digits, 8)))
            else:
                raise self.fail(f"unknown escape \\{esc}")


def parse(text: str) -> Path:
    """Parse the server's notation; `parse(s).format() == s` for every path the server prints.

    Map keys containing dots come back split into several `Field`s; walk functions re-join them.
    """
    return _Parser(text).path()


def format_path(path: Sequence[PathElement]) -> str:
    """Server notation of a path given as any sequence of elements."""
    return "".join(e.format() for e in path)


def go_unquote(quoted: str) -> str:
    """Decode a Go `%q` string, quotes included, as printed in conflict messages."""
    parser = _Parser(quoted)
    text = parser.quoted()
    if parser.pos != len(quoted):
        raise parser.fail("trailing characters after string")
    return text


def _as_path(path: Path | str) -> Path:
    return parse(path) if isinstance(path, str) else path


# --- associative lists ----------------------------------------------------------------------------

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


def _key_matches(item: Any, key: Key) -> bool:
    if not isinstance(item, Mapping):
        return False
    for name, want in key.items:
        if name in item:
            if canonical_json(item[name]) != want:
                return False
        elif name not in _KEY_DEFAULTS or canonical_json(_KEY_DEFAULTS[name]) != want:
            return False
    return True


# --- walking objects ------------------------------------------------------------------------------

Step: TypeAlias = str | int


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
        index = next((n for n, item in enumerate(node) if _key_matches(item, element)), None)
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
            if not isinstance(node, Mapping) or element.name not in node:
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
            node = next((item for item in node if _key_matches(item, element)), MISSING)
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
    yield from _walk(obj, Path(), kind)


def _walk(node: Any, path: Path, kind: str | None) -> Iterator[tuple[Path, Any]]:
    if isinstance(node, Mapping):
        if not node and path:
            yield path, node
        for name, value in node.items():
            yield from _walk(value, path.child(Field(str(name))), kind)
        return
    if isinstance(node, list) and node:
        keys = list_keys(path, node, kind)
        if keys == SET:
            for item in node:
                yield path.child(Value.of(item)), item
            return
        if isinstance(keys, tuple):
            for item in node:
                yield from _walk(item, path.child(item_key(item, keys)), kind)
            return
    yield path, node


def leaf_paths(obj: Mapping[str, Any]) -> list[str]:
    """The fields an apply of `obj` sets, in server notation (comparable with owned paths)."""
    return [path.format() for path, _ in leaves(obj)]
