"""How values become text for people: one cut, one tail of a tool's output, one timestamp format.

A low layer (imports nothing of gitops_sync): reports, error messages, `/status` and Events all format
through here, so a value is cut, and a time written, the same way wherever it is shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["ELLIPSIS", "brief", "last_lines", "rfc3339", "truncate"]

ELLIPSIS = "…"


def truncate(text: str, limit: int | None) -> str:
    """`text` cut to at most `limit` characters, the last one `…` when cut (None: never cut)."""
    return text if limit is None or len(text) <= limit else text[: limit - 1] + ELLIPSIS


def brief(value: object, limit: int = 40) -> str:
    """A field's value inside a sentence (a fight, a yield): a string as it is, anything else as Python
    writes it (`3`, `None`, `{'a': 1}`), cut to `limit` characters."""
    return truncate(value if isinstance(value, str) else repr(value), limit)


def last_lines(text: str, count: int, *, keep: Callable[[str], bool] | None = None, keep_most: int = 0) -> list[str]:
    """What a tool's output says last: its last `count` non-blank lines (right-stripped), plus up to
    `keep_most` earlier ones `keep` picks (the line naming the cause), in the output's order."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    chosen = set(range(max(0, len(lines) - count), len(lines)))
    if keep is not None:
        chosen |= set([i for i, ln in enumerate(lines) if keep(ln)][:keep_most])
    return [lines[i] for i in sorted(chosen)]


def rfc3339(epoch: float, digits: int = 0) -> str:
    """UTC RFC 3339 with `digits` fractional digits: 0 for /status and Event times, 3 for the ownership
    history, 6 for metav1.MicroTime (a Lease's renewTime)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))
    if digits:
        stamp += f".{int(epoch % 1 * 10**digits):0{digits}d}"
    return stamp + "Z"
