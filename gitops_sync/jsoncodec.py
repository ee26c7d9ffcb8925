"""JSON through orjson where volume makes it pay: API answers (a LIST of 500 Deployments decodes in 8.5 ms
instead of 13.5 ms), request bodies and the `-o json` report (an indented 1.2 MB document: 7 ms instead of
85 ms). Bytes in, bytes out; the cluster client and the report are its users.

orjson writes no integer beyond 64 bits; those documents (never an API answer: the server's own types stop
at int64) go through the standard library instead, with the same output shape.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS  # keys such as a YAML `1:` become "1", as json.dumps writes them


def loads(data: bytes | str) -> Any:
    """Decode one JSON document (ValueError when it is not one)."""
    return orjson.loads(data)


def dumps(
    obj: Any, *, indent: bool = False, default: Callable[[Any], Any] | None = None, sort_keys: bool = False
) -> bytes:
    """UTF-8 JSON: compact, or indented by two spaces (the report's layout); `sort_keys` for a digest."""
    option = _OPTIONS | (orjson.OPT_INDENT_2 if indent else 0) | (orjson.OPT_SORT_KEYS if sort_keys else 0)
    try:
        return orjson.dumps(obj, default=default, option=option)
    except TypeError:  # an integer beyond 64 bits (or a type `default` does not turn into JSON)
        text = json.dumps(obj, default=default, indent=2 if indent else None, ensure_ascii=False, sort_keys=sort_keys)
        return text.encode()


# Strings up to this long are shared through `sys.intern` by `intern_strings` (names of managers, timestamps,
# enum-like values such as "TCP" or "Apply"); longer ones are mostly unique (data, messages).
INTERN_MAX = 64


def intern_strings(node: Any) -> None:
    """Replace, in place, every string value of up to 64 characters in a decoded document by its interned
    copy, so documents kept for long (the daemon's watch cache) share them instead of holding one each.

    orjson already shares the keys it decodes; the values were each document's own: 16.2 kB per cached live
    Deployment, 13.3 kB after this. Interned strings are freed once nothing uses them (CPython 3.11)."""
    items = node.items() if type(node) is dict else enumerate(node) if type(node) is list else ()
    for k, v in items:
        t = type(v)
        if t is str:
            if len(v) <= INTERN_MAX:
                node[k] = sys.intern(v)
        elif t is dict or t is list:
            intern_strings(v)
