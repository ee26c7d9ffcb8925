"""Bounded YAML/JSON loading and YAML output.

YAML aliases let a 1 kB file describe 10^9 nodes (billion laughs). PyYAML shares aliased objects, so
loading alone stays small, but everything after (diffs, JSON encoding, deep copies) expands them. So we
compose the node graph first, count the nodes as if aliases were expanded (memoised per node, linear in
the file), and only construct documents that stay within the bound. The bound holds per file and per
render (a `NodeBudget` shared by every file of one render), and so does a nesting-depth limit: the
diff, mask and YAML-output stages downstream recurse, and Python's recursion limit must never be what
stops a manifest.

Nothing read from a file is echoed in an error except keys, tags and positions: a constructor error
(`password: !!int hunter2`) would otherwise quote a Secret's value.

Every file the repository controls that gitops-sync reads itself goes through here, manifests and
configuration alike (`.gitops-sync.yaml`, kustomizations, a chart's Chart.yaml and values files):
`read_bounded` caps its bytes, `load_yaml` its nodes and depth, `load_config` both with the smaller
limits of a configuration file. A plain `yaml.safe_load` has none of these bounds.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.error import Mark
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gitops_sync.errors import RenderError
from gitops_sync.jsoncodec import INTERN_MAX
from gitops_sync.resource import Manifest

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass
class NodeBudget:
    """How many YAML nodes (aliases expanded) one file and one whole render may build, and how deep.

    One instance is shared by every file of a render, so many small files (or many documents) cannot
    add up to what one file may not be.
    """

    per_file: int = 1_000_000
    per_render: int = 10_000_000
    max_depth: int = 100  # nesting levels; real manifests (CRD schemas included) stay well below
    used: int = 0  # nodes built so far in this render

    def left(self, file_used: int) -> int:
        return min(self.per_file - file_used, self.per_render - self.used)

    def exceeded(self, number: int, file_used: int) -> str:
        """The message for a document that does not fit, naming the limit it hit."""
        if self.per_file - file_used <= self.per_render - self.used:
            return (
                f"document {number} expands to more than {self.per_file} YAML nodes in this file "
                "(aliases expanded); refusing to load it"
            )
        return (
            f"document {number} brings the render past {self.per_render} YAML nodes over all files "
            "(aliases expanded); refusing to load it"
        )

    def too_deep(self, number: int) -> str:
        return f"document {number} is nested more than {self.max_depth} levels deep"


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    """SafeLoader whose results are JSON values, as the API server will read them."""

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        # A scalar whose tag does not fit it (`!!int hunter2`, `!!bool x`, a 5,000-digit number) makes
        # PyYAML's constructor raise ValueError/KeyError/... quoting the value; say where, never what.
        try:
            return super().construct_object(node, deep=deep)
        except (yaml.YAMLError, RecursionError, MemoryError):
            raise
        except Exception:
            raise ConstructorError(
                None, None, f"the value cannot be read as {_short_tag(node.tag)}", node.start_mark
            ) from None

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[str, Any]:
        # Keys become strings while building: as Python keys, `on:` (True) and `1:` would be one key.
        assert isinstance(node, MappingNode)
        _check_unique_keys_here(node)  # before merging: `<<` keys may repeat what the map says itself
        self.flatten_mapping(node)  # `<<` merge keys
        # Keys and short string values interned: the daemon keeps every rendered manifest for as long as Git
        # holds it, and 20,000 bench objects took 70 MB with a string of their own at each occurrence, 49 MB
        # sharing them (the same figure as their copy decoded from the render cache, jsoncodec.intern_strings).
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise ConstructorError(None, None, "a mapping key must be a scalar", key_node.start_mark)
            value = self.construct_object(value_node, deep=deep)
            if type(value) is str and len(value) <= INTERN_MAX:
                value = sys.intern(value)
            mapping[sys.intern(_key(self.construct_object(key_node)))] = value
        return mapping


def _scalar_text(loader: yaml.SafeLoader, node: Node) -> str:
    # Kubernetes reads YAML as JSON: an unquoted date or !!binary stays a string there, not a datetime/bytes.
    assert isinstance(node, ScalarNode)
    return str(loader.construct_scalar(node))


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _scalar_text)
_Loader.add_constructor("tag:yaml.org,2002:binary", lambda ld, n: "".join(_scalar_text(ld, n).split()))
# YAML 1.1 resolves a plain `=` to the "value" type and a plain `<<` to "merge", and PyYAML has no constructor
# for either as a value; the API server and kubectl (go-yaml) read both as strings. kube-prometheus's
# AlertmanagerConfig CRD has `- =` in an enum of match operators. (`<<` as a key still merges.)
_Loader.add_constructor("tag:yaml.org,2002:value", _scalar_text)
_Loader.add_constructor("tag:yaml.org,2002:merge", _scalar_text)


class _Dumper(_BaseDumper):  # type: ignore[valid-type,misc]
    """Never emit anchors/aliases: the output is read by people and by tools without alias support."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def load_yaml(data: bytes | str, source: str, budget: NodeBudget | int) -> list[tuple[int, Any]]:
    """(document number from 1, value) for each document, empty documents left out.

    `budget`: the render's NodeBudget (charged with what this file builds), or a node limit for this
    text alone.
    """
    if isinstance(budget, int):
        budget = NodeBudget(per_file=budget, per_render=budget)
    docs: list[tuple[int, Any]] = []
    file_used = 0
    # Without an anchor (`&`) there are no aliases, so nothing is shared and nothing expands, and without a
    # tag (`!`) every value is already JSON-shaped: the node-count walk and the copy have nothing to do.
    # The walk stays for files large enough to exceed the bound by themselves (a node takes >= 1 byte).
    # (An `&` or `!` inside a string value merely takes the full path.)
    amp, bang = ("&", "!") if isinstance(data, str) else (b"&", b"!")
    # The plain path counts nodes after building (the bytes bound them); the full path before.
    bound = 2 * (len(data) + 1)
    plain = amp not in data and bang not in data and bound <= budget.left(0)  # type: ignore[operator]
    loader = _Loader(data)
    node: Node | None = None
    try:
        number = 0
        while loader.check_node():
            node = loader.get_node()
            number += 1
            if node is None:
                continue
            if plain:
                value = loader.construct_document(node)
                size, depth = measure(value)
                if depth > budget.max_depth:
                    _check_nodes(node, budget, source, number, file_used)  # raises, naming the line
                    raise RenderError(f"invalid YAML: {budget.too_deep(number)}", file=source)
            else:
                size = _check_nodes(node, budget, source, number, file_used)
                value = _plain(loader.construct_document(node))
            file_used += size
            budget.used += size
            if value is not None:
                docs.append((number, value))
    except RenderError:
        raise
    except yaml.MarkedYAMLError as err:
        raise _marked_error(err, node, source) from None
    except yaml.YAMLError as err:  # e.g. a reader error on a control character or bad encoding
        raise RenderError(f"invalid YAML: {err}", file=source) from None
    except RecursionError:
        raise RenderError("invalid YAML: nested too deeply", file=source) from None
    except Exception as err:  # whatever else PyYAML throws: its text may quote the value, so only the type
        raise RenderError(f"invalid YAML: cannot be read ({type(err).__name__})", file=source) from None
    finally:
        loader.dispose()
    return docs


def _marked_error(err: yaml.MarkedYAMLError, node: Node | None, source: str) -> RenderError:
    """PyYAML's error with a position, as a RenderError naming the line (and the object, once composed)."""
    if isinstance(err, ConstructorError) and node is not None:
        err = _first_unreadable_scalar(node) or err
    context = err.context or ""
    if err.context_mark is not None and err.problem_mark is not None and context:
        # Where the unclosed thing started is usually where the mistake is, not where libyaml noticed.
        context += f" started at line {err.context_mark.line + 1}, column {err.context_mark.column + 1}"
    problem = ": ".join(p for p in (context, err.problem) if p)
    # A constructor error comes after the document was composed: name its object too.
    obj = _node_label(node) if isinstance(err, ConstructorError) else None
    where = _at(source, err.problem_mark or err.context_mark)
    return RenderError(f"invalid YAML: {problem}", file=where, obj=obj)


def read_bounded(path: Path, name: str, limit: int) -> bytes:
    """The bytes of a file, refused past `limit` (checked again while reading: the file may grow after
    stat()); `name` is how errors call it (its path in the repository)."""
    too_big = RenderError(f"file is larger than the {limit}-byte limit", file=name)
    try:
        if path.stat().st_size > limit:
            raise too_big
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as err:
        raise RenderError(f"cannot read: {err.strerror or type(err).__name__}", file=name) from None
    if len(data) > limit:
        raise too_big
    return data


# A configuration file (a kustomization, .gitops-sync.yaml, Chart.yaml) is a page or two of YAML: limits far
# below a manifest's, so a hostile one costs milliseconds and kilobytes before it is refused.
CONFIG_MAX_BYTES = 1024 * 1024
CONFIG_MAX_NODES = 100_000


def load_config(path: Path, name: str, what: str) -> dict[str, Any] | None:
    """The one YAML mapping of a configuration file the repository controls (None when it is empty),
    bounded in bytes, nodes (aliases expanded) and depth like a manifest; `what` names it in errors."""
    data = read_bounded(path, name, CONFIG_MAX_BYTES)
    docs = load_yaml(data, name, NodeBudget(per_file=CONFIG_MAX_NODES, per_render=CONFIG_MAX_NODES))
    if not docs:
        return None
    if len(docs) > 1 or not isinstance(docs[0][1], dict):
        raise RenderError(f"{what} must be one YAML mapping", file=name)
    doc: dict[str, Any] = docs[0][1]
    return doc


def load_json(data: bytes, source: str, budget: NodeBudget | None = None) -> list[tuple[int, Any]]:
    """A JSON file: one document, or one per element when the top level is an array.

    An empty (zero-byte or whitespace-only) file has no documents, as an empty YAML file has none:
    `diff -o json > report.json` inside the repository must not trip over its own output file.
    """
    if not data.strip():
        return []
    budget = budget or NodeBudget()
    try:
        value = json.loads(data, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as err:
        raise RenderError(f"invalid JSON: {err.msg}", file=f"{source}:{err.lineno}:{err.colno}") from None
    except _DuplicateKeyError as err:
        raise RenderError(f"invalid JSON: duplicate key {err.args[0]!r}", file=source) from None
    except UnicodeDecodeError as err:
        raise RenderError(f"invalid JSON: not UTF-8/16/32 text ({err.reason})", file=source) from None
    except RecursionError:
        raise RenderError("invalid JSON: nested too deeply", file=source) from None
    except ValueError as err:  # e.g. a number past Python's int-string limit; the text may quote it
        raise RenderError(f"invalid JSON: cannot be read ({type(err).__name__})", file=source) from None
    items = value if isinstance(value, list) else [value]
    docs: list[tuple[int, Any]] = []
    file_used = 0
    for number, item in enumerate(items, start=1):
        size, depth = measure(item)
        if depth > budget.max_depth:
            raise RenderError(f"invalid JSON: {budget.too_deep(number)}", file=source)
        if size > budget.left(file_used):
            raise RenderError(budget.exceeded(number, file_used), file=source)
        file_used += size
        budget.used += size
        if item is not None:
            docs.append((number, item))
    return docs


def measure(value: Any) -> tuple[int, int]:
    """(nodes, nesting depth) of a JSON-shaped value, counting a mapping's keys as nodes, as YAML does.

    Level by level, without recursion: this runs on every document, before anything deeper may recurse.
    """
    count = 0
    depth = 0
    level = [value]
    while level:
        depth += 1
        count += len(level)
        below: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                count += len(item)
                below.extend(item.values())
            elif isinstance(item, list):
                below.extend(item)
        level = below
    return count, depth


def to_yaml(objs: Iterable[Manifest]) -> str:
    """Multi-document YAML (`---` before each), keys in the order given."""
    return str(
        yaml.dump_all(
            objs,
            Dumper=_Dumper,
            explicit_start=True,
            sort_keys=False,
            default_flow_style=False,
            allow_unicode=True,
            width=1 << 30,
        )
    )


class _DuplicateKeyError(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # kubectl rejects duplicate keys; a silent last-one-wins would apply something nobody reviewed.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_nodes(root: Node, budget: NodeBudget, source: str, number: int, file_used: int) -> int:
    """The document's node count with aliases expanded; rejects counts past what the budget has left,
    nesting past its depth, recursive aliases and duplicate mapping keys.

    Iterative post-order walk with one size and depth per distinct node: linear in the composed graph
    however large the expansion, and no recursion limit to hit.
    """
    limit = budget.left(file_used)
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            children = _children(node)
            size = 1 + sum(sizes[id(child)] for child in children)
            if size > limit:
                raise RenderError(budget.exceeded(number, file_used), file=source)
            depth = 1 + max((depths[id(child)] for child in children), default=0)
            if depth > budget.max_depth:
                raise RenderError(
                    f"invalid YAML: {budget.too_deep(number)}", file=_at(source, node), obj=_node_label(root)
                )
            sizes[key] = size
            depths[key] = depth
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise RenderError(
                f"recursive YAML alias in document {number}", file=_at(source, node), obj=_node_label(root)
            )
        on_path.add(key)
        stack.append((node, True))
        if isinstance(node, MappingNode):
            _check_unique_keys(node, source, root)
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


def _first_unreadable_scalar(root: Node) -> ConstructorError | None:
    """The constructor error of the first scalar (in file order) that cannot be read, if a scalar is the cause.

    PyYAML builds a document level by level, so the error it raises names the shallowest bad value, which
    can be thousands of lines after the first one; the author wants the first.
    """
    loader = _Loader("")
    seen: set[int] = set()
    stack: list[Node] = [root]
    try:
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, ScalarNode):
                try:
                    loader.construct_object(node)
                except ConstructorError as err:
                    return err
            else:
                stack.extend(reversed(_children(node)))
    finally:
        loader.dispose()
    return None


def _duplicate_key(node: MappingNode) -> ScalarNode | None:
    """The first key that repeats an earlier one of the same mapping (`<<` merge keys may repeat)."""
    seen: set[str] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        if key_node.value in seen:
            return key_node
        seen.add(key_node.value)
    return None


def _check_unique_keys_here(node: MappingNode) -> None:
    """Duplicate keys while constructing (what _check_unique_keys reports, for documents not walked)."""
    if (dup := _duplicate_key(node)) is not None:
        raise ConstructorError(None, None, f"duplicate key {dup.value!r}", dup.start_mark)


def _check_unique_keys(node: MappingNode, source: str, root: Node) -> None:
    if (dup := _duplicate_key(node)) is not None:
        raise RenderError(f"invalid YAML: duplicate key {dup.value!r}", file=_at(source, dup), obj=_node_label(root))


def _plain(value: Any) -> Any:
    """A fresh JSON-shaped copy: string keys (YAML 1.1 `on:`/`1:` keys become "true"/"1" as in kubectl),
    no shared sub-objects (later stages mutate objects), sets and bytes made JSON values."""
    if isinstance(value, dict):
        return {_key(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=str)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def _key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return key if isinstance(key, str) else str(key)


def _node_label(node: Node | None) -> str | None:
    """`Kind/name` of a composed document, read from its scalars without constructing anything."""
    if not isinstance(node, MappingNode):
        return None
    found: dict[str, str] = {}
    for key, value in node.value:
        if isinstance(key, ScalarNode) and key.value == "kind" and isinstance(value, ScalarNode):
            found["kind"] = str(value.value)[:253]
        if isinstance(key, ScalarNode) and key.value == "metadata" and isinstance(value, MappingNode):
            for inner_key, inner in value.value:
                if isinstance(inner_key, ScalarNode) and inner_key.value == "name" and isinstance(inner, ScalarNode):
                    found["name"] = str(inner.value)[:253]
    return "/".join(found[k] for k in ("kind", "name") if found.get(k)) or None


def _short_tag(tag: str) -> str:
    """`tag:yaml.org,2002:int` -> `!!int`; local tags as written."""
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag.removeprefix(prefix) if tag.startswith(prefix) else tag


def _at(source: str, where: Node | Mark | None) -> str:
    """`file:line:col` (1-based, as editors count) for a node or mark."""
    mark = where.start_mark if isinstance(where, Node) else where
    return f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
