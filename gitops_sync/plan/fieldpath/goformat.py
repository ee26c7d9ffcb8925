"""Values spelled as Go spells them, because the API server prints paths and messages with Go.

Printing (`to_string`, structured-merge-diff's `value.ToString`) gives the key values inside a printed
path element (`element.py`); reading (`unquote_at`, `strconv.Unquote`) takes quoted strings back out of a
printed path or a conflict message (`notation.py`). No dependency on the rest of the package.
"""

from __future__ import annotations

import math
from typing import Any, Final

__all__ = ["GoStringError", "go_float", "go_quote", "to_string", "unquote_at"]

_GO_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}


def go_quote(s: str) -> str:
    """strconv.Quote: what `%q` prints for string key values."""
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_float(f: float) -> str:
    """`%v` of a float64: integral values below 1e21 print without a fraction or exponent."""
    if math.isfinite(f) and f.is_integer() and abs(f) < 1e21:
        return str(int(f))
    text = repr(f)
    if "e" in text:
        mantissa, exp = text.split("e")
        sign = "-" if exp.startswith("-") else "+"
        text = f"{mantissa}e{sign}{int(exp.lstrip('+-')):02d}"
    return text


def to_string(v: Any) -> str:
    """A JSON value as `value.ToString` prints it inside `[k=v]` and `[=v]`."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return go_float(v)
    if isinstance(v, str):
        return go_quote(v)
    if isinstance(v, list):
        return "[" + ",".join(to_string(x) for x in v) + "]"
    if isinstance(v, dict):
        return "".join(f"{k}={to_string(v[k])}" for k in sorted(v))
    raise TypeError(f"not a JSON value: {v!r}")


_SIMPLE_ESCAPES: Final = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    '"': '"',
    "'": "'",
    "\\": "\\",
}
_HEX_WIDTH: Final = {"x": 2, "u": 4, "U": 8}


class GoStringError(ValueError):
    """A quoted string that cannot be read; `pos` is the offset reached, for the caller's message."""

    def __init__(self, what: str, pos: int) -> None:
        super().__init__(what)
        self.what = what
        self.pos = pos


def unquote_at(text: str, pos: int) -> tuple[str, int]:
    """strconv.Unquote of the double-quoted Go string opening at `text[pos]`: (the string, offset after it)."""
    if text[pos : pos + 1] != '"':
        raise GoStringError("expected '\"'", pos)
    pos += 1
    out: list[str] = []
    while True:
        if pos >= len(text):
            raise GoStringError("unterminated string", pos)
        ch = text[pos]
        pos += 1
        if ch == '"':
            return "".join(out), pos
        if ch != "\\":
            out.append(ch)
            continue
        esc = text[pos] if pos < len(text) else ""
        pos += 1
        if esc in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[esc])
        elif esc in _HEX_WIDTH:
            digits = text[pos : pos + _HEX_WIDTH[esc]]
            pos += _HEX_WIDTH[esc]
            out.append(chr(int(digits, 16)))
        elif esc.isdigit():
            digits = text[pos - 1 : pos + 2]
            pos += 2
            out.append(chr(int(digits, 8)))
        else:
            raise GoStringError(f"unknown escape \\{esc}", pos)
