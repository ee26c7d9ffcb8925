"""The Git-position mapper: where in the repository each reported field is written.

`Engine.run` calls `locate_fields` once the entries are planned; the `source` it sets on every field
change is what the report and the web page print next to it (`file:line:column`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from gitops_sync.plan import fieldpath
from gitops_sync.plan.changeset import Entry
from gitops_sync.plan.planner import Target
from gitops_sync.render import locate
from gitops_sync.resource import Manifest

_ORIGIN = re.compile(r"^(?P<file>.+)#(?P<number>\d+)(?: items\[(?P<item>\d+)\])?$")


def locate_fields(entries: Sequence[Entry], targets: Sequence[Target], root: Path) -> None:
    """Where Git says each reported field: `file:line:column` for a plain YAML/JSON file (read again, only for
    objects with field entries), the file a tool rendered it from (kustomize origin, Helm `# Source:`), or at
    least the kustomization/chart directory."""
    by_key = {t.key: t for t in targets}
    cache: dict[tuple[str, int], locate.Positions] = {}
    for e in entries:
        fields = [*e.drift, *e.conflicts, *e.ignored]
        t = by_key.get(e.key)
        if not fields or t is None:
            continue
        found = _ORIGIN.match(t.origin)
        if t.source or found is None:
            for c in fields:
                c.source = t.source or t.origin
            continue
        rel, number = found["file"], int(found["number"])
        if (rel, number) not in cache:
            try:
                cache[(rel, number)] = locate.positions((root / rel).read_bytes(), number)
            except OSError:
                cache[(rel, number)] = {}
        base: tuple[locate.Segment, ...] = ("items", int(found["item"])) if found["item"] else ()
        for c in fields:
            c.source = field_position(rel, cache[(rel, number)], base, c.path, t.manifest)


def field_position(
    rel: str, positions: locate.Positions, base: tuple[locate.Segment, ...], path: str, desired: Manifest
) -> str:
    """`rel:line:column` of the field, else of its nearest ancestor Git writes, else `rel`.

    A printed path splits a dotted map key (`.metadata.labels.app.kubernetes.io/name`): it is re-joined as
    `desired` has it, or the position found would be the parent map's (its first key, lines early)."""
    segments = _segments(path, desired)
    for n in range(len(segments), -1, -1):
        found = positions.get((*base, *segments[:n]))
        if found is not None:
            return f"{rel}:{found[0]}:{found[1]}"
    return rel


def _segments(path: str, desired: Manifest) -> list[locate.Segment]:
    """The printed field path as the position index spells it, dotted keys re-joined as `desired` has them;
    cut at the first element the index cannot name (a list item keyed by more than its name)."""
    segments: list[locate.Segment] = []
    try:
        elements = list(fieldpath.parse(path))
    except ValueError:
        elements = []
    for n in range(len(elements), 0, -1):  # the longest prefix Git sets, keys re-joined
        resolved = fieldpath.resolve(desired, fieldpath.Path(tuple(elements[:n])))
        if resolved is not None:
            elements = [*resolved, *elements[n:]]
            break
    for element in elements:
        if isinstance(element, fieldpath.Field):
            segments.append(element.name)
        elif isinstance(element, fieldpath.Index):
            segments.append(element.index)
        elif isinstance(element, fieldpath.Key) and len(element.items) == 1 and element.items[0][0] == "name":
            segments.append(("name", str(json.loads(element.items[0][1]))))
        else:
            break
    return segments
