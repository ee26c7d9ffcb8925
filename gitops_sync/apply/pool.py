"""One function over many objects on a bounded thread pool, results in input order.

Every verb of the apply step (read live, apply, prune, wait) sends one request per object; this is how
they run concurrently (`--concurrency`) without each building its own pool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")


def each(
    fn: Callable[[_T], _R],
    items: Sequence[_T],
    *,
    concurrency: int,
    on_done: Callable[[_R], None] | None = None,
) -> list[_R]:
    """`fn` over items on the thread pool, in order; `on_done` sees each result (progress display)."""

    def run(item: _T) -> _R:
        r = fn(item)
        if on_done:
            on_done(r)
        return r

    if len(items) <= 1 or concurrency <= 1:
        return [run(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(items))) as pool:
        return list(pool.map(run, items))
