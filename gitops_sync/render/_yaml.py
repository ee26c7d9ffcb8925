"""Bounded YAML/JSON loading and YAML output.

YAML aliases let a 1 kB file describe 10^9 nodes (billion laughs). PyYAML shares aliased objects, so
loading alone stays small, but everything after (diffs, JSON encoding, deep copies) expands them. So we
compose the node graph first, count the nodes as if aliases were expanded (memoised per node, linear in
the file), and only construct documents that stay within the bound.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.error import Mark
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gitops_sync.errors import RenderError
from gitops_sync.resource import Manifest

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    """SafeLoader whose results are JSON values, as the API server will read them."""

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[str, Any]:
        # Keys become strings while building: as Python keys, `on:` (True) and `1:` would be one key.
        assert isinstance(node, MappingNode)
        _check_unique_keys_here(node)  # before merging: `<<` keys may repeat what the map says itself
        self.flatten_mapping(node)  # `<<` merge keys
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise ConstructorError(None, None, "a mapping key must be a scalar", key_node.start_mark)
            mapping[_key(self.construct_object(key_node))] = self.construct_object(value_node, deep=deep)
        return mapping


def _scalar_text(loader: yaml.SafeLoader, node: Node) -> str:
    # Kubernetes reads YAML as JSON: an unquoted date or !!binary stays a string there, not a datetime/bytes.
    assert isinstance(node, ScalarNode)
    return str(loader.construct_scalar(node))


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _scalar_text)
_Loader.add_constructor("tag:yaml.org,2002:binary", lambda ld, n: "".join(_scalar_text(ld, n).split()))


class _Dumper(_BaseDumper):  # type: ignore[valid-type,misc]
    """Never emit anchors/aliases: the output is read by people and by tools without alias support."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def load_yaml(data: bytes | str, source: str, max_nodes: int) -> list[tuple[int, Any]]:
    """(document number from 1, value) for each document, empty documents left out."""
    docs: list[tuple[int, Any]] = []
    # Without an anchor (`&`) there are no aliases, so nothing is shared and nothing expands, and without a
    # tag (`!`) every value is already JSON-shaped: the node-count walk and the copy have nothing to do.
    # The walk stays for files large enough to exceed the bound by themselves (a node takes >= 1 byte).
    # (An `&` or `!` inside a string value merely takes the full path.)
    amp, bang = ("&", "!") if isinstance(data, str) else (b"&", b"!")
    plain = amp not in data and bang not in data and 2 * (len(data) + 1) <= max_nodes  # type: ignore[operator]
    loader = _Loader(data)
    try:
        number = 0
        while loader.check_node():
            node = loader.get_node()
            number += 1
            if node is None:
                continue
            if plain:
                value = loader.construct_document(node)
            else:
                _check_nodes(node, max_nodes, source, number)
                value = _plain(loader.construct_document(node))
            if value is not None:
                docs.append((number, value))
    except yaml.MarkedYAMLError as err:
        context = err.context or ""
        if err.context_mark is not None and err.problem_mark is not None and context:
            # Where the unclosed thing started is usually where the mistake is, not where libyaml noticed.
            context += f" started at line {err.context_mark.line + 1}, column {err.context_mark.column + 1}"
        problem = ": ".join(p for p in (context, err.problem) if p)
        raise RenderError(f"invalid YAML: {problem}", file=_at(source, err.problem_mark or err.context_mark)) from None
    except yaml.YAMLError as err:  # e.g. a reader error on a control character or bad encoding
        raise RenderError(f"invalid YAML: {err}", file=source) from None
    except RecursionError:
        raise RenderError("invalid YAML: nested too deeply", file=source) from None
    finally:
        loader.dispose()
    return docs


def load_json(data: bytes, source: str) -> list[tuple[int, Any]]:
    """A JSON file: one document, or one per element when the top level is an array."""
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
    items = value if isinstance(value, list) else [value]
    return [(i, item) for i, item in enumerate(items, start=1) if item is not None]


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


def _check_nodes(root: Node, limit: int, source: str, number: int) -> None:
    """Reject alias expansions past `limit` nodes, recursive aliases and duplicate mapping keys.

    Iterative post-order walk with one size per distinct node: linear in the composed graph however
    large the expansion, and no recursion limit to hit.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            if size > limit:
                raise RenderError(
                    f"document {number} expands to more than {limit} YAML nodes (aliases expanded); "
                    "refusing to load it",
                    file=source,
                )
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise RenderError(f"recursive YAML alias in document {number}", file=_at(source, node))
        on_path.add(key)
        stack.append((node, True))
        if isinstance(node, MappingNode):
            _check_unique_keys(node, source)
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _check_unique_keys_here(node: MappingNode) -> None:
    """Duplicate keys while constructing (what _check_unique_keys reports, for documents not walked)."""
    seen: set[str] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        if key_node.value in seen:
            raise ConstructorError(None, None, f"duplicate key {key_node.value!r}", key_node.start_mark)
        seen.add(key_node.value)


def _check_unique_keys(node: MappingNode, source: str) -> None:
    seen: set[str] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        if key_node.value in seen:
            raise RenderError(f"invalid YAML: duplicate key {key_node.value!r}", file=_at(source, key_node))
        seen.add(key_node.value)


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


def _at(source: str, where: Node | Mark | None) -> str:
    """`file:line:col` (1-based, as editors count) for a node or mark."""
    mark = where.start_mark if isinstance(where, Node) else where
    return f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
