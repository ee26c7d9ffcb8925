"""What this process asked of the API server: reads, writes and dry runs, told apart per request.

`Client` counts every request here; a no-op pass proves it wrote nothing by these counts (the report and
the daemon's metrics show them), and the client's write hook and fence ask `is_write`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Query = Mapping[str, str | int | bool | None]  # a request's query parameters (None and "" are left out)
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass
class RequestStats:
    """Counts what this process asked of the API server, so a no-op pass can prove it wrote nothing.

    A request retried after a 429 counts once in reads/writes/dry_runs; `throttled` counts the retries.
    `bytes_read`: the bodies of every answer (watch streams not included), what listing costs in decoding.
    """

    reads: int = 0
    writes: int = 0
    dry_runs: int = 0
    throttled: int = 0
    bytes_read: int = 0

    def count(self, method: str, query: Query | None, body: Any = None) -> None:
        if method in _READS:
            self.reads += 1
        elif is_dry_run(query, body):
            self.dry_runs += 1
        else:
            self.writes += 1


def is_dry_run(query: Query | None, body: Any = None) -> bool:
    """Whether a request only simulates: `?dryRun=All`, or a DeleteOptions body with `dryRun`."""
    return bool((query and query.get("dryRun")) or (isinstance(body, dict) and body.get("dryRun")))


def is_write(method: str, query: Query | None, body: Any = None) -> bool:
    """Whether a request may change something: any method but GET and HEAD, unless it is a dry run."""
    return method not in _READS and not is_dry_run(query, body)
