"""Who owns which field: `metadata.managedFields` and the conflicts of a 409 apply.

The server records ownership per manager (name, operation, subresource) as a FieldsV1 trie;
the FieldsV1 codec (`plan/fieldpath/fieldsv1.py`) turns each trie into a set of paths in the server's
printed notation, so a conflict path, a diff path and an owned path compare as strings. See docs:
server-side apply, field management.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gitops_sync.plan.fieldpath import MISSING, Path, get, go_unquote, parse, parse_fields_v1
from gitops_sync.resource import Manifest

__all__ = [
    "Conflict",
    "ManagedFieldsEntry",
    "managed_fields",
    "owners",
    "owners_among",
    "owners_excluding",
    "parse_conflicts",
]


@dataclass(frozen=True)
class ManagedFieldsEntry:
    """One manager's entry; `fields` holds every owned path: leaves and `.`-owned nodes."""

    manager: str
    operation: str  # "Apply" | "Update"
    subresource: str  # "" for the main resource
    api_version: str
    time: str
    fields: frozenset[Path]

    @functools.cached_property
    def _owned(self) -> frozenset[str]:
        return frozenset(p.format() for p in self.fields)

    @functools.cached_property
    def _interior(self) -> frozenset[str]:
        """Nodes with owned descendants: owning such a node is not owning all below it."""
        return frozenset(prefix.format() for p in self.fields for prefix in p.prefixes())

    @property
    def owned_paths(self) -> frozenset[str]:
        """Every owned path in server notation, formatted once per entry."""
        return self._owned

    def owns(self, path: Path | str) -> bool:
        """Owns exactly `path` (as a leaf or as a `.` node)."""
        return _canonical(path) in self._owned

    def owns_whole(self, path: Path | str) -> bool:
        """Owns `path` with nothing tracked below it: an atomic value, owned as one."""
        text = _canonical(path)
        return text in self._owned and text not in self._interior

    @property
    def identity(self) -> tuple[str, str, str]:
        """(manager, operation, subresource): what the server treats as one manager."""
        return self.manager, self.operation, self.subresource


def _canonical(path: Path | str) -> str:
    """Server spelling of `path`; non-canonical input (unsorted key fields) is normalised."""
    return (parse(path) if isinstance(path, str) else path).format()


def managed_fields(obj: Manifest) -> list[ManagedFieldsEntry]:
    """The object's managedFields entries, in the server's order."""
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    return list(_parse_entries(json.dumps(entries, default=str)))


@functools.lru_cache(maxsize=512)
def _parse_entries(entries_json: str) -> tuple[ManagedFieldsEntry, ...]:
    """Cached by content: a plan asks `owners` about many paths of one live object."""
    out = []
    for raw in json.loads(entries_json):
        fields_v1 = raw.get("fieldsV1") if raw.get("fieldsType", "FieldsV1") == "FieldsV1" else None
        out.append(
            ManagedFieldsEntry(
                manager=str(raw.get("manager", "")),
                operation=str(raw.get("operation", "")),
                subresource=str(raw.get("subresource") or ""),
                api_version=str(raw.get("apiVersion", "")),
                time=str(raw.get("time") or ""),
                fields=frozenset(parse_fields_v1(fields_v1 or {})),
            )
        )
    return tuple(out)


def _entries(obj: Manifest | Sequence[ManagedFieldsEntry]) -> tuple[Sequence[ManagedFieldsEntry], Any]:
    if isinstance(obj, Mapping):
        return managed_fields(obj), obj
    return obj, None


def owners(obj: Manifest | Sequence[ManagedFieldsEntry], path: Path | str) -> list[ManagedFieldsEntry]:
    """Entries owning exactly `path`; else those owning its nearest atomic ancestor.

    A leaf inside an atomic map or list (`.spec.selector.matchLabels.app`) is not tracked on its own:
    whoever owns the atomic node owns it. The ancestor must be a map or list in `obj` (when an object
    is given), so the label `app` is never mistaken for an ancestor of `app.kubernetes.io/name`.
    """
    entries, live = _entries(obj)
    return owners_among(entries, live, parse(path) if isinstance(path, str) else path)


def owners_among(
    entries: Sequence[ManagedFieldsEntry], live: Any, query: Path, text: str = ""
) -> list[ManagedFieldsEntry]:
    """`owners` with the entries already read (`managed_fields(live)`) and the path parsed (`text`: its
    `format()`, when known): asking about every field of one object (the daemon's history of each watched
    object) reads its managedFields once, not once per field. `live` None: the ancestor's type is not checked."""
    text = text or query.format()
    exact = [e for e in entries if text in e.owned_paths]
    if exact:
        return exact
    for ancestor in query.prefixes():
        holders = [e for e in entries if e.owns_whole(ancestor)]
        if not holders:
            continue
        node = get(live, ancestor) if live is not None else None
        if live is None or (node is not MISSING and isinstance(node, Mapping | list)):
            return holders
    return []


def owners_excluding(
    obj: Manifest | Sequence[ManagedFieldsEntry],
    path: Path | str,
    *,
    manager: str,
    operation: str = "Apply",
    subresource: str = "",
) -> list[ManagedFieldsEntry]:
    """Owners of `path` other than the manager (name, operation, subresource) given: "us"."""
    return [e for e in owners(obj, path) if e.identity != (manager, operation, subresource)]


# --- 409 conflicts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Conflict:
    """One field another manager owns with a different value than the one we applied."""

    path: str  # as the server printed it
    manager: str
    operation: str  # "Apply" | "Update" | "" when unknown
    subresource: str
    api_version: str


_QUOTED: Final = r'("(?:[^"\\]|\\.)*")'
# printManager in k8s.io/apimachinery managedfields: Update managers carry `using <apiVersion>`
# (and once carried ` at <RFC3339>`); Apply managers print no version.
_CAUSE_RE: Final = re.compile(
    rf"^conflicts? with {_QUOTED}(?: with subresource {_QUOTED})?(?: using (\S+?)(?: at (\S+?))?)?:?$"
)


def parse_conflicts(body: Mapping[str, Any] | str, live: Manifest | None = None) -> list[Conflict]:
    """Field-manager conflicts of a 409 Status body; [] for a resourceVersion precondition 409.

    The message says `using <apiVersion>` only for Update managers, so the operation follows from
    it; with the live object, the matching managedFields entry confirms the operation and supplies
    the apiVersion of Apply managers (never printed).
    """
    status = json.loads(body) if isinstance(body, str) else body
    causes = (status.get("details") or {}).get("causes") or []
    entries = managed_fields(live) if live is not None else []
    out: list[Conflict] = []
    for cause in causes:
        if cause.get("reason") != "FieldManagerConflict":
            continue
        path = str(cause.get("field") or "")
        message = str(cause.get("message") or "").strip()
        match = _CAUSE_RE.match(message)
        if match:
            manager, subresource = go_unquote(match[1]), go_unquote(match[2] or '""')
            api_version = match[3] or ""
            operation = "Update" if api_version else "Apply"
        else:
            manager, subresource, api_version, operation = message, "", "", ""
        entry = _match_entry(entries, manager, subresource, operation, path)
        if entry is not None:
            operation, api_version = entry.operation, api_version or entry.api_version
        out.append(Conflict(path, manager, operation, subresource, api_version))
    return out


def _match_entry(
    entries: Iterable[ManagedFieldsEntry], manager: str, subresource: str, operation: str, path: str
) -> ManagedFieldsEntry | None:
    candidates = [e for e in entries if e.manager == manager and e.subresource == subresource]
    if len(candidates) > 1:
        candidates = [e for e in candidates if e.owns(path)] or [e for e in candidates if e.operation == operation]
    return candidates[0] if len(candidates) == 1 else None
