"""canonical_json's fast spellings of strings and ints are json.dumps's spellings, exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gitops_sync.plan.fieldpath.element import Key, canonical_json


def _slow(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "app",
        'quote " and \\ backslash',
        "tab\tnew\nline\r\x00\x1f",
        "ünïcödé ✓ 日本",
        "\u2028\u2029",
        "\ud800",  # a lone surrogate
        0,
        -1,
        80,
        2**70,
        -(2**64),
    ],
)
def test_fast_spelling_is_json_dumps(value: Any) -> None:
    assert canonical_json(value) == _slow(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "true"),
        (False, "false"),
        (None, "null"),
        (80.0, "80"),
        (1.5, "1.5"),
        ({"b": 1, "a": [2.0]}, '{"a":[2],"b":1}'),
    ],
)
def test_other_values_keep_their_spelling(value: Any, expected: str) -> None:
    assert canonical_json(value) == expected


def test_a_key_of_an_int_port_and_a_float_port_is_the_same_key() -> None:
    assert Key.of({"containerPort": 80, "protocol": "TCP"}) == Key.of({"containerPort": 80.0, "protocol": "TCP"})
