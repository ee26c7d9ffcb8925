"""Secret values never leave the process: every report shows `***` in their place.

Plain `***`, no hash or length: a hash of a low-entropy secret (a PIN, `changeme`) is as good as the
value to anyone with a dictionary, and a length narrows it. That a diff entry exists already says
the value changed; keys stay visible so a reader knows which one.
Masked: `data` and `stringData` values, and the `last-applied-configuration` annotation, which
carries the whole Secret as kubectl last applied it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Final

from gitops_sync.conventions import LAST_APPLIED, MASK
from gitops_sync.plan.diff import FieldDiff
from gitops_sync.plan.fieldpath import MISSING, Field, parse
from gitops_sync.resource import Manifest, ObjectKey, is_secret

__all__ = ["MASK", "VALUES_DIFFER", "Redactor", "is_secret", "mask_diff", "mask_literals", "mask_secret"]

# The live side of a masked Secret value that differs from Git: `***` against `***` reads as "equal".
VALUES_DIFFER: Final = "*** (values differ)"
_VALUE_MAPS: Final = ("data", "stringData")
_LAST_APPLIED_PATH: Final = f".metadata.annotations.{LAST_APPLIED}"


def _mask_value(value: Any) -> Any:
    """`***` for a value, keys kept for a map of values; absence and null stay visible."""
    if value is MISSING or value is None:
        return value
    if isinstance(value, Mapping):
        return {k: None if v is None else MASK for k, v in value.items()}
    return MASK


def _mask_annotations(annotations: Any) -> Any:
    if isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
        return {**annotations, LAST_APPLIED: MASK}
    return annotations


def _mask_object(obj: Manifest) -> Manifest:
    out = copy.deepcopy(obj)
    for name in _VALUE_MAPS:
        if name in out:
            out[name] = _mask_value(out[name])
    meta = out.get("metadata")
    if isinstance(meta, dict) and "annotations" in meta:
        meta["annotations"] = _mask_annotations(meta["annotations"])
    return out


def mask_secret(obj: Manifest) -> Manifest:
    """A copy of a Secret with every `data`/`stringData` value as `***`; other kinds as they are."""
    return _mask_object(obj) if is_secret(obj) else obj


def mask_diff(key_or_kind: ObjectKey | Manifest | str, diffs: Iterable[FieldDiff]) -> list[FieldDiff]:
    """The diffs of one object with Secret values masked on both sides (non-Secrets unchanged)."""
    if not is_secret(key_or_kind):
        return list(diffs)
    return [replace(d, desired=_mask_at(d.path, d.desired), live=_mask_at(d.path, d.live)) for d in diffs]


def _mask_at(path: str, value: Any) -> Any:
    if value is MISSING or value is None:
        return value
    if path.startswith(_LAST_APPLIED_PATH):
        return MASK
    elements = parse(path)
    if not elements:
        return _mask_object(dict(value)) if isinstance(value, Mapping) else MASK
    if elements[0] in (Field("data"), Field("stringData")):
        return MASK if len(elements) > 1 else _mask_value(value)
    if path == ".metadata.annotations":
        return _mask_annotations(value)
    if path == ".metadata" and isinstance(value, Mapping) and "annotations" in value:
        return {**value, "annotations": _mask_annotations(value["annotations"])}
    return value


# --- text we did not write: the last line of defence ---------------------------------------------

_SHORT_VALUE: Final = 4  # values shorter than this are masked only as whole words, not inside others
_QUOTED_LITERAL: Final = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")


class Redactor:
    """Masks every Secret value it has seen in a text: for messages nobody wrote with masking in mind
    (an unexpected exception's text and traceback), where a value may have been interpolated.

    Values are registered as written (`stringData`), as stored (base64 `data`) and decoded, and in their
    `repr` spelling (how exception messages quote them).
    """

    def __init__(self, manifests: Iterable[Manifest] = ()) -> None:
        self._values: set[str] = set()
        self.add(manifests)

    def add(self, manifests: Iterable[Manifest]) -> None:
        for obj in manifests:
            if not is_secret(obj):
                continue
            for name in _VALUE_MAPS:
                values = obj.get(name)
                if isinstance(values, Mapping):
                    for value in values.values():
                        self._add_value(value, decode=name == "data")

    def _add_value(self, value: Any, *, decode: bool) -> None:
        if value is None:
            return
        text = value if isinstance(value, str) else str(value)
        spellings = {text, repr(text)[1:-1]}
        if decode:
            with contextlib.suppress(binascii.Error, ValueError):
                plain = base64.b64decode(text, validate=True).decode("utf-8", errors="replace")
                spellings |= {plain, repr(plain)[1:-1]}
        self._values |= {s for s in spellings if s.strip()}

    def __call__(self, text: str) -> str:
        for value in sorted(self._values, key=len, reverse=True):
            if len(value) >= _SHORT_VALUE:
                text = text.replace(value, MASK)
            else:
                text = re.sub(rf"(?<!\w){re.escape(value)}(?!\w)", MASK, text)
        return text


def mask_literals(text: str) -> str:
    """Every quoted literal (`'...'`, `"..."`) as `'***'`: for an exception raised while the values that
    might be in it are not known yet (before rendering finished)."""
    return _QUOTED_LITERAL.sub("'***'", text)
