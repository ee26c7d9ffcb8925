"""goformat.py: values printed as Go prints them in paths, and quoted strings read back with their end offset."""

from __future__ import annotations

from typing import Any

import pytest

from gitops_sync.plan.fieldpath.goformat import GoStringError, go_float, go_quote, to_string, unquote_at


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("plain", '"plain"'),
        ('say "hi"\n', '"say \\"hi\\"\\n"'),
        ("a\\b\tc", '"a\\\\b\\tc"'),
        ("\x01é\u200b😀", '"\\x01é\\u200b😀"'),
        ("\U000e0001", '"\\U000e0001"'),
    ],
)
def test_go_quote_escapes_as_strconv_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted
    assert unquote_at(quoted, 0) == (text, len(quoted))


@pytest.mark.parametrize(
    ("value", "printed"),
    [(80.0, "80"), (1.5, "1.5"), (-3.0, "-3"), (1e20, "100000000000000000000"), (1e21, "1e+21"), (1e-7, "1e-07")],
)
def test_go_float(value: float, printed: str) -> None:
    assert go_float(value) == printed


@pytest.mark.parametrize(
    ("value", "printed"),
    [
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (7, "7"),
        (2.0, "2"),
        ("x", '"x"'),
        ([1, "a", None], '[1,"a",null]'),
        ({"b": 1, "a": "x"}, 'a="x"b=1'),
    ],
)
def test_to_string(value: Any, printed: str) -> None:
    assert to_string(value) == printed


def test_to_string_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(TypeError, match="not a JSON value"):
        to_string(object())


def test_unquote_at_reads_from_an_offset_and_says_where_it_ended() -> None:
    text = '[name="a\\u00e9",x=1]'
    assert unquote_at(text, 6) == ("aé", 15)
    assert text[15] == ","


@pytest.mark.parametrize(
    ("text", "what", "pos"),
    [("x", "expected '\"'", 0), ('"abc', "unterminated string", 4), ('"a\\q"', "unknown escape \\q", 4)],
)
def test_unquote_at_errors_carry_the_offset(text: str, what: str, pos: int) -> None:
    with pytest.raises(GoStringError) as err:
        unquote_at(text, 0)
    assert (err.value.what, err.value.pos) == (what, pos)
    assert isinstance(err.value, ValueError)
