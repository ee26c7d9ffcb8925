"""Where Git says it: line and column of every value in one document of a YAML file, and the source file
of a document a tool (kustomize, Helm) printed.

Positions are looked up only for objects a report has field entries for (the engine asks after the pass),
so a render never pays for them. Paths here are plain segments (a map key, `("name", value)` for a list
item with a scalar `name`, else the item's index); the engine maps field paths onto them. Nothing read is
echoed: only keys and positions leave this module.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gitops_sync.conventions import ORIGIN_ANNOTATION

Segment = str | int | tuple[str, Any]
Positions = dict[tuple[Segment, ...], tuple[int, int]]

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MAX_DEPTH = 100
_HELM_SOURCE = re.compile(r"^# Source: (.+?)\s*$", re.MULTILINE)
_ORIGIN_PATH = re.compile(r"^path:\s*(.+?)\s*$", re.MULTILINE)

__all__ = ["Positions", "Segment", "helm_sources", "positions", "take_origin"]


def positions(text: str | bytes, number: int) -> Positions:
    """(line, column), both from 1, of the value of every field of document `number` (from 1); {} when absent
    or unreadable. Aliases are not followed (a shared node is reported where it is written)."""
    loader = _BaseLoader(text)
    try:
        n = 0
        while loader.check_node():
            node = loader.get_node()
            n += 1
            if n == number:
                return _walk(node) if node is not None else {}
    except yaml.YAMLError:
        return {}
    finally:
        loader.dispose()
    return {}


def _walk(root: Node) -> Positions:
    out: Positions = {}
    seen: set[int] = set()
    stack: list[tuple[tuple[Segment, ...], Node]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if id(node) in seen or len(path) > _MAX_DEPTH:
            continue
        seen.add(id(node))
        out[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        # Children pushed in reverse: popped in document order, so a shared (aliased) node is keyed by
        # the path where it is written, before any alias of it.
        if isinstance(node, MappingNode):
            for key, value in reversed(node.value):
                if isinstance(key, ScalarNode):
                    stack.append(((*path, str(key.value)), value))
        elif isinstance(node, SequenceNode):
            for index, item in reversed(list(enumerate(node.value))):
                stack.append(((*path, _item_segment(item, index)), item))
    return out


def _item_segment(item: Node, index: int) -> Segment:
    if isinstance(item, MappingNode):
        for key, value in item.value:
            if isinstance(key, ScalarNode) and key.value == "name" and isinstance(value, ScalarNode):
                return ("name", value.value)
    return index


def helm_sources(output: str) -> dict[int, str]:
    """Document number (as the loader counts them) -> the template `helm template` says it came from."""
    out: dict[int, str] = {}
    number = 0
    started = False
    for chunk in re.split(r"^---[^\n]*$", output, flags=re.MULTILINE):
        if not started and not chunk.strip():
            started = True
            continue  # before the first `---`: no document
        started = True
        number += 1
        found = _HELM_SOURCE.search(chunk)
        if found:
            out[number] = found.group(1)
    return out


def take_origin(manifest: dict[str, Any]) -> str:
    """kustomize's `config.kubernetes.io/origin` (buildMetadata: [originAnnotations]): the file it names,
    removed from the manifest so it is never applied; "" without one."""
    meta = manifest.get("metadata")
    if not isinstance(meta, dict):
        return ""
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict) or ORIGIN_ANNOTATION not in annotations:
        return ""
    origin = str(annotations.pop(ORIGIN_ANNOTATION) or "")
    if not annotations:
        del meta["annotations"]
    found = _ORIGIN_PATH.search(origin)
    return found.group(1) if found else ""
