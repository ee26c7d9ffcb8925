"""/status and the other JSON answers are encoded a slice at a time: same bytes as json.dumps."""

from __future__ import annotations

import datetime
import json
import tracemalloc
from typing import Any

from gitops_sync.daemon.serving.routes import encode_json


def test_same_bytes_as_json_dumps_for_small_large_and_odd_documents() -> None:
    big: dict[str, Any] = {
        "objects": [
            {
                "name": f"cm-{i}",
                "fields": {".data.key": [{"value": i, "owners": ["a"]}]},
                "note": "é ✓",
                "n": None,
                "ok": True,
                "x": 1.5,
            }
            for i in range(3000)
        ]
    }
    for doc in ({}, [], "text", 1, {"when": datetime.date(2024, 1, 2), "ünï": "\u2028"}, big):
        assert b"".join(encode_json(doc)) == json.dumps(doc, indent=2, default=str).encode() + b"\n"


def test_a_large_document_is_never_held_twice_while_it_is_encoded() -> None:
    """The slices are the answer: no joined copy of them (the peak of /status at 20,000 objects)."""
    doc = {"objects": [{"name": f"cm-{i}", "state": "in sync", "fields": {".data.key": i}} for i in range(20000)]}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        slices = encode_json(doc)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    size = sum(map(len, slices))
    assert len(slices) > 1 and peak < size * 1.5, (peak, size)
