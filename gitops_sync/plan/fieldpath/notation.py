"""The API server's printed path notation, read back into elements and printed from them.

The server prints a path as in SSA conflict messages (structured-merge-diff `Path.String()`):
`.spec.replicas`, `.spec.template.spec.containers[name="api"].image`,
`.spec.ports[port=80,protocol="TCP"].targetPort`, `.metadata.finalizers[="a"]`, `.spec.args[0]`.
Each element prints itself (`element.py`); this module reads such text into a `Path` for `walk.py`, and
decodes the quoted manager names of conflict messages for `plan/ownership.py`.

Map keys are printed verbatim (`.metadata.labels.app.kubernetes.io/name`), so a printed path is
ambiguous where keys contain dots: `parse` splits on every dot and the walk re-joins the pieces
against the object it walks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gitops_sync.plan.fieldpath.element import Field, Index, Key, Path, PathElement, Value
from gitops_sync.plan.fieldpath.goformat import GoStringError, unquote_at

__all__ = ["format_path", "go_unquote", "parse"]


class _Parser:
    """Recursive-descent reader of the printed notation; errors name the offset."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> ValueError:
        return ValueError(f"invalid field path {self.text!r} at offset {self.pos}: {what}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise self.fail(f"expected {ch!r}")
        self.pos += 1

    def path(self) -> Path:
        elements: list[PathElement] = []
        while self.pos < len(self.text):
            ch = self.peek()
            if ch == ".":
                self.pos += 1
                start = self.pos
                while self.pos < len(self.text) and self.text[self.pos] not in ".[":
                    self.pos += 1
                elements.append(Field(self.text[start : self.pos]))
            elif ch == "[":
                elements.append(self.bracket())
            else:
                raise self.fail("expected '.' or '['")
        return Path(elements)

    def bracket(self) -> PathElement:
        self.expect("[")
        if self.peek() == "=":
            self.pos += 1
            element: PathElement = Value.of(self.literal())
            self.expect("]")
            return element
        end = self.text.find("]", self.pos)
        if end > self.pos and self.text[self.pos : end].isdigit():
            index = int(self.text[self.pos : end])
            self.pos = end + 1
            return Index(index)
        fields: dict[str, Any] = {}
        while True:
            eq = self.text.find("=", self.pos)
            if eq <= self.pos:
                raise self.fail("expected name=value")
            name = self.text[self.pos : eq]
            self.pos = eq + 1
            fields[name] = self.literal()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return Key.of(fields)

    def literal(self) -> Any:
        ch = self.peek()
        if ch == '"':
            return self.quoted()
        if ch == "[":
            self.pos += 1
            items: list[Any] = []
            while self.peek() != "]":
                items.append(self.literal())
                if self.peek() == ",":
                    self.pos += 1
                elif self.peek() != "]":
                    raise self.fail("expected ',' or ']'")
            self.pos += 1
            return items
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in ",]":
            self.pos += 1
        token = self.text[start : self.pos]
        if token in ("true", "false"):
            return token == "true"
        if token == "null":
            return None
        try:
            return int(token)
        except ValueError:
            pass
        try:
            return float(token)
        except ValueError:
            raise self.fail(f"unreadable value {token!r}") from None

    def quoted(self) -> str:
        """A double-quoted Go string at the current offset."""
        try:
            text, self.pos = unquote_at(self.text, self.pos)
        except GoStringError as err:
            self.pos = err.pos
            raise self.fail(err.what) from None
        return text


def parse(text: str) -> Path:
    """Parse the server's notation; `parse(s).format() == s` for every path the server prints.

    Map keys containing dots come back split into several `Field`s; walk functions re-join them.
    """
    return _Parser(text).path()


def format_path(path: Sequence[PathElement]) -> str:
    """Server notation of a path given as any sequence of elements."""
    return "".join(e.format() for e in path)


def go_unquote(quoted: str) -> str:
    """Decode a Go `%q` string, quotes included, as printed in conflict messages."""
    parser = _Parser(quoted)
    text = parser.quoted()
    if parser.pos != len(quoted):
        raise parser.fail("trailing characters after string")
    return text
