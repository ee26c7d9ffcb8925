"""Semantic versions and the range syntax Helm takes for `--version` (Masterminds semver's common subset).

A chart source's `chartVersion` is either one version or a range; charts.py picks the highest version in a
repository's index (or among a registry's tags) that the range allows, once per pass, and reports it.

Ranges: comparisons `=`, `!=`, `>`, `>=`, `<`, `<=` joined by spaces or commas (all must hold), `||` between
alternatives, `^1.2` (same major; same minor below 1.0), `~1.2.3` (same minor), wildcards `1.2.x`/`1.*`/`*`,
and hyphen ranges `1.2 - 1.4`. Pre-releases match only a range that names a pre-release itself (Helm's rule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)(?:\.(?P<minor>0|[1-9]\d*))?(?:\.(?P<patch>0|[1-9]\d*))?"
    r"(?:-(?P<pre>[0-9A-Za-z.-]+))?(?:\+(?P<build>[0-9A-Za-z.-]+))?$"
)
_PARTIAL = re.compile(
    r"^v?(?P<major>\d+|[xX*])(?:\.(?P<minor>\d+|[xX*]))?(?:\.(?P<patch>\d+|[xX*]))?(?:-(?P<pre>[0-9A-Za-z.-]+))?$"
)
_COMPARISON = re.compile(r"^(?P<op>!=|>=|<=|=|>|<|\^|~>?)?\s*(?P<ver>\S+)$")


class RangeError(ValueError):
    """A version or range that cannot be read (the message names it)."""


@dataclass(frozen=True, order=False)
class Version:
    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Version | None:
        """The version `text` names (a `v` prefix and build metadata allowed), or None."""
        m = _VERSION.match(text.strip())
        if not m:
            return None
        pre = tuple(int(p) if p.isdigit() else p for p in m["pre"].split(".")) if m["pre"] else ()
        return cls(int(m["major"]), int(m["minor"] or 0), int(m["patch"] or 0), pre)

    def key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        """Ordering key: a release sorts after its pre-releases; numeric identifiers before alphanumeric."""
        pre = tuple((0, p) if isinstance(p, int) else (1, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, pre)


@dataclass(frozen=True)
class _Bound:
    op: str
    version: Version

    def allows(self, v: Version) -> bool:
        a, b = v.key(), self.version.key()
        return {
            "=": a == b,
            "!=": a != b,
            ">": a > b,
            ">=": a >= b,
            "<": a < b,
            "<=": a <= b,
        }[self.op]


@dataclass(frozen=True)
class Range:
    """A parsed range: alternatives (`||`), each a list of bounds that must all hold."""

    text: str
    alternatives: tuple[tuple[_Bound, ...], ...]
    names_prerelease: bool

    @classmethod
    def parse(cls, text: str) -> Range:
        alternatives = []
        names_pre = False
        for alt in text.split("||"):
            alt = re.sub(r"\s*-\s+", " - ", alt.strip())
            bounds: list[_Bound] = []
            parts = [p for p in re.split(r"[\s,]+", alt) if p]
            i = 0
            while i < len(parts):
                if i + 2 < len(parts) and parts[i + 1] == "-":  # hyphen range
                    bounds += _expand(">=", parts[i], text)
                    bounds += _expand("<=", parts[i + 2], text)
                    i += 3
                    continue
                part = parts[i]
                if part in ("=", "!=", ">", ">=", "<", "<=", "^", "~", "~>") and i + 1 < len(parts):
                    part, i = part + parts[i + 1], i + 1  # `>= 1.2` written with a space
                m = _COMPARISON.match(part)
                if not m:
                    raise RangeError(f"cannot read version range {text!r}")
                bounds += _expand(m["op"] or "=", m["ver"], text)
                names_pre |= "-" in m["ver"]
                i += 1
            if not bounds:
                raise RangeError(f"empty version range {text!r}")
            alternatives.append(tuple(bounds))
        return cls(text, tuple(alternatives), names_pre)

    def allows(self, v: Version) -> bool:
        if v.pre and not self.names_prerelease:
            return False
        return any(all(b.allows(v) for b in alt) for alt in self.alternatives)

    def best(self, candidates: list[str]) -> str | None:
        """The highest candidate (as spelt there) the range allows, or None."""
        parsed = [(v, c) for c in candidates if (v := Version.parse(c)) is not None and self.allows(v)]
        return max(parsed, key=lambda p: p[0].key())[1] if parsed else None


def is_exact(text: str) -> bool:
    """`text` names one version in full (major.minor.patch, no operator or wildcard): pulled by that name, no
    listing needed. `1.2` is a range (1.2.x), as Helm reads it."""
    return re.fullmatch(r"v?\d+\.\d+\.\d+", text.split("+")[0].split("-")[0].strip()) is not None and (
        Version.parse(text) is not None
    )


def _expand(op: str, ver: str, text: str) -> list[_Bound]:
    """One comparison (wildcards and partial versions spelt out) as plain bounds."""
    m = _PARTIAL.match(ver)
    if not m:
        raise RangeError(f"cannot read version {ver!r} in range {text!r}")
    fields = [m["major"], m["minor"], m["patch"]]
    known = []
    for f in fields:
        if f is None or f in "xX*":
            break
        known.append(int(f))
    pre = tuple(int(p) if p.isdigit() else p for p in m["pre"].split(".")) if m["pre"] else ()
    if not known:
        return [_Bound(">=", Version(0, 0, 0))] if op in ("=", ">=", "^", "~", "~>", "<=") else []
    full = known + [0] * (3 - len(known))
    low = Version(full[0], full[1], full[2], pre)

    def bump(index: int) -> Version:
        parts = known[: index + 1] + [0] * (2 - index)
        parts[index] += 1
        return Version(parts[0], parts[1], parts[2], (0,))  # below every pre-release of that release

    if op == "^":
        first = next((i for i, n in enumerate(known) if n != 0), len(known) - 1)
        return [_Bound(">=", low), _Bound("<", bump(min(first, len(known) - 1)))]
    if op in ("~", "~>"):
        return [_Bound(">=", low), _Bound("<", bump(0 if len(known) == 1 else 1))]
    if len(known) < 3 and op in ("=", "<=", ">"):  # `1.2` means 1.2.x
        upper = bump(len(known) - 1)
        if op == "=":
            return [_Bound(">=", low), _Bound("<", upper)]
        return [_Bound("<" if op == "<=" else ">=", upper)]
    if len(known) < 3 and op == "!=":
        raise RangeError(f"`!=` needs a full version (major.minor.patch) in range {text!r}")
    return [_Bound(op, low)]
