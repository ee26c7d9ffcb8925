"""/status and the other JSON answers are encoded a slice at a time: same bytes as json.dumps."""

from __future__ import annotations

import datetime
import json
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
        assert encode_json(doc) == json.dumps(doc, indent=2, default=str).encode() + b"\n"
