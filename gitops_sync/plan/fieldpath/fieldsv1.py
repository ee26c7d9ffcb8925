"""The FieldsV1 codec: a managedFields trie (`{"f:spec": {"f:replicas": {}}}`) into owned paths.

Keys are structured-merge-diff's serialised path elements: `f:<name>`, `k:<json of key fields>`,
`v:<json value>`, `i:<index>`; `".": {}` marks a node owned itself. The paths come out as `Path`s
whose printed form is the server's notation, so `plan/ownership.py` can compare what each manager
owns with diff and conflict paths as plain strings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gitops_sync.plan.fieldpath.element import Field, Index, Key, Path, PathElement, Value

__all__ = ["parse_fields_v1"]


def _decode_element(key: str) -> PathElement:
    kind, sep, body = key.partition(":")
    if sep:
        if kind == "f":
            return Field(body)
        if kind == "k":
            fields = json.loads(body)
            if isinstance(fields, dict):
                return Key.of(fields)
        elif kind == "v":
            return Value.of(json.loads(body))
        elif kind == "i" and body.isdigit():
            return Index(int(body))
    raise ValueError(f"unknown FieldsV1 key {key!r}")


def parse_fields_v1(fields_v1: Mapping[str, Any]) -> set[Path]:
    """FieldsV1 trie -> owned paths: `{}` children are leaves, `".": {}` owns the node itself."""
    out: set[Path] = set()
    stack: list[tuple[Path, Mapping[str, Any]]] = [(Path(), fields_v1)]
    while stack:
        prefix, node = stack.pop()
        for key, child in node.items():
            if key == ".":
                if prefix:
                    out.add(prefix)
                continue
            path = prefix.child(_decode_element(key))
            if isinstance(child, Mapping) and child:
                stack.append((path, child))
            else:
                out.add(path)
    return out
