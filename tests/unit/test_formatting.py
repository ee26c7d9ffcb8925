"""The one cut, tail and timestamp every report, message and /status field goes through."""

from __future__ import annotations

import pytest

from gitops_sync.formatting import brief, last_lines, rfc3339, truncate
from gitops_sync.resource import ObjectKey, is_secret, resource_version


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [("abcdef", None, "abcdef"), ("abcdef", 6, "abcdef"), ("abcdefg", 6, "abcde…"), ("", 3, "")],
)
def test_truncate_cuts_to_the_limit_with_an_ellipsis(text: str, limit: int | None, expected: str) -> None:
    out = truncate(text, limit)
    assert out == expected
    assert limit is None or len(out) <= limit


def test_last_lines_keeps_the_last_non_blank_lines() -> None:
    text = "one\n\n  two  \nthree\n   \nfour\n"
    assert last_lines(text, 2) == ["three", "four"]
    assert last_lines(text, 9) == ["one", "  two", "three", "four"]


def test_last_lines_keeps_an_earlier_line_that_names_the_cause_in_order() -> None:
    text = "fatal: bad ref\nnoise 1\nerror: two\nnoise 2\nnoise 3\n"
    picked = last_lines(text, 1, keep=lambda ln: ln.startswith(("fatal:", "error:")), keep_most=1)
    assert picked == ["fatal: bad ref", "noise 3"]


@pytest.mark.parametrize(
    ("digits", "expected"),
    [(0, "2023-11-14T22:13:20Z"), (3, "2023-11-14T22:13:20.123Z"), (6, "2023-11-14T22:13:20.123456Z")],
)
def test_rfc3339_in_utc_with_the_fraction_asked_for(digits: int, expected: str) -> None:
    assert rfc3339(1700000000.123456, digits) == expected


@pytest.mark.parametrize(
    ("what", "secret"),
    [
        (ObjectKey("", "Secret", "ns", "s"), True),
        (ObjectKey("example.com", "Secret", "ns", "s"), False),
        ({"apiVersion": "v1", "kind": "Secret"}, True),
        ({"apiVersion": "example.com/v1", "kind": "Secret"}, False),
        ("Secret", True),
        ("ConfigMap", False),
    ],
)
def test_is_secret_means_the_core_group_secret(what: object, secret: bool) -> None:
    assert is_secret(what) is secret  # type: ignore[arg-type]


def test_resource_version_of_anything() -> None:
    assert resource_version({"metadata": {"resourceVersion": "42"}}) == "42"
    assert resource_version({"metadata": {}}) == ""
    assert resource_version(None) == ""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("text", "text"),
        (3, "3"),
        (None, "None"),
        ({"a": 1}, "{'a': 1}"),
        ([1, "x"], "[1, 'x']"),
        ("x" * 50, "x" * 39 + "…"),
    ],
)
def test_brief_writes_a_value_for_a_sentence_the_same_for_fights_and_yields(value: object, expected: str) -> None:
    assert brief(value) == expected
