"""Ignore rules: fields Git sets that the cluster is allowed to own (Argo CD ignoreDifferences, Flux `.spec.ignore`).

A rule names objects (group, kind, namespace, name globs and labels), fields (server field paths or JSON
pointers) and a mode:

- `if-owned-by-others`: leave the field out of what we apply while another manager owns it (Flux 2.9's
  ownership-aware ignore): its value stays, our claim goes; nobody else owns it: Git's value is applied.
- `always`: never change the field: left out while another manager owns it or the object lacks it, else
  applied with the live value (we keep owning it, nothing changes).

Rules come from `--ignore` flags and from `.gitops-sync.yaml` (rendered root, else repository root).
The engine turns each target's apply body into the body without the ignored fields (`apply_rules`)
before planning, so `diff`, `sync` and the daemon agree; what was ignored is listed on the entry.
"""

from __future__ import annotations

import copy
import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitops_sync.conventions import RULES_FILE
from gitops_sync.errors import RenderError
from gitops_sync.plan import actors, fieldpath, ownership
from gitops_sync.plan.changeset import Ignored
from gitops_sync.render import load_config
from gitops_sync.resource import Manifest, ObjectKey

IF_OWNED = "if-owned-by-others"
ALWAYS = "always"
MODES = (IF_OWNED, ALWAYS)

__all__ = ["ALWAYS", "IF_OWNED", "MODES", "IgnoreRule", "Selector", "apply_rules", "load_file", "parse_flag"]


@dataclass(frozen=True)
class Selector:
    """Which objects a rule is about; every part is a glob (`*` by default), labels must all match."""

    group: str = "*"
    kind: str = "*"
    namespace: str = "*"
    name: str = "*"
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, key: ObjectKey, manifest: Manifest) -> bool:
        if not all(
            fnmatch.fnmatchcase(value, pattern)
            for value, pattern in (
                (key.group, self.group),
                (key.kind, self.kind),
                (key.namespace, self.namespace),
                (key.name, self.name),
            )
        ):
            return False
        labels = (manifest.get("metadata") or {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in self.labels)


@dataclass(frozen=True)
class IgnoreRule:
    selector: Selector
    paths: tuple[str, ...]  # server notation
    mode: str = IF_OWNED
    origin: str = "--ignore"  # the flag, or the rules file

    def describe(self) -> str:
        return f"{self.mode} ({self.origin})"


def parse_path(text: str) -> str:
    """A field path (`.spec.replicas`, `.spec.template.spec.containers[name="web"].image`) or a JSON
    pointer (`/spec/replicas`, `/metadata/annotations/a~1b`) in the server's notation."""
    text = text.strip()
    if text.startswith("/"):
        parts = [p.replace("~1", "/").replace("~0", "~") for p in text[1:].split("/")]
        if not all(parts):
            raise ValueError(f"JSON pointer {text!r} has an empty segment")
        path = fieldpath.Path(tuple(fieldpath.Field(p) for p in parts))
    elif text.startswith("."):
        path = fieldpath.parse(text)
    else:
        raise ValueError(f"{text!r} is neither a field path (.spec.replicas) nor a JSON pointer (/spec/replicas)")
    if not path:
        raise ValueError(f"{text!r} names the whole object")
    return path.format()


_BARE_WORD = re.compile(r"[A-Za-z][A-Za-z-]*")


def parse_flag(text: str) -> IgnoreRule:
    """`[GROUP/]KIND:[NAMESPACE/]NAME:PATH[:MODE]`, globs allowed: `apps/Deployment:*:.spec.replicas`,
    `ConfigMap:team-a/*:/data/generated:always`. A kind without a group matches any group; `core/Kind`
    (or `/Kind`) the core group."""
    parts = text.split(":")
    if len(parts) > 3 and parts[-1] in MODES:
        mode, parts = parts[-1], parts[:-1]
    elif len(parts) > 3 and _BARE_WORD.fullmatch(parts[-1]):
        # A path never ends in a bare word after a colon (keys holding `:` are quoted list keys), so this is a
        # misspelt mode: refuse it rather than fold it into a path that then matches nothing.
        raise ValueError(f"{text!r}: unknown mode {parts[-1]!r} (expected one of: {', '.join(sorted(MODES))})")
    else:
        mode = IF_OWNED
    if len(parts) < 3:
        raise ValueError(f"{text!r}: expected [GROUP/]KIND:[NAMESPACE/]NAME:PATH[:MODE]")
    kind_part, name_part, path_part = parts[0], parts[1], ":".join(parts[2:])
    group, _, kind = kind_part.rpartition("/") if "/" in kind_part else ("*", "", kind_part)
    group = "" if group == "core" else group
    namespace, _, name = name_part.rpartition("/") if "/" in name_part else ("*", "", name_part)
    return IgnoreRule(
        Selector(group=group, kind=kind or "*", namespace=namespace, name=name or "*"),
        (parse_path(path_part),),
        mode,
    )


_RULE_KEYS = {"target", "paths", "jsonPointers", "mode"}
_TARGET_KEYS = {"group", "kind", "namespace", "name", "labels"}


def load_file(root: Path, repo_root: Path | None = None) -> list[IgnoreRule]:
    """The rules of `.gitops-sync.yaml` at the rendered root, else at the repository root; [] without one.

    Anything wrong is a RenderError naming the file and the rule (exit 2)."""
    for base in (root, repo_root):
        if base is None:
            continue
        path = base / RULES_FILE
        if path.is_file():
            name = str(path.relative_to(repo_root)) if repo_root and path.is_relative_to(repo_root) else str(path)
            # Bounded like every file the repository controls: an alias bomb or 5,000 nested brackets here
            # must be an error naming the file, not gigabytes of expansion or a RecursionError.
            return parse_document(load_config(path, name, "the rules file"), name)
    return []


def parse_document(doc: Any, name: str) -> list[IgnoreRule]:
    """`{ignore: [{target: {...}, paths: [...], jsonPointers: [...], mode: ...}]}` -> rules."""
    if doc is None:
        return []
    if not isinstance(doc, Mapping) or set(doc) - {"ignore"}:
        raise RenderError("expected a mapping with the key `ignore` (a list of rules)", file=name)
    rules = doc.get("ignore") or []
    if not isinstance(rules, list):
        raise RenderError("`ignore` must be a list of rules", file=name)
    out = []
    for i, raw in enumerate(rules):
        where = f"ignore[{i}]"
        try:
            out.append(_rule(raw, name))
        except (ValueError, TypeError) as exc:
            raise RenderError(f"{where}: {exc}", file=name) from None
    return out


def _rule(raw: Any, name: str) -> IgnoreRule:
    if not isinstance(raw, Mapping):
        raise ValueError("a rule is a mapping")
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise ValueError(f"unknown key(s) {sorted(unknown)}; expected {sorted(_RULE_KEYS)}")
    target = raw.get("target") or {}
    if not isinstance(target, Mapping) or set(target) - _TARGET_KEYS:
        raise ValueError(f"`target` is a mapping of {sorted(_TARGET_KEYS)}")
    labels = target.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError("`target.labels` is a map of strings")
    for k in ("group", "kind", "namespace", "name"):
        if k in target and not isinstance(target[k], str):
            raise ValueError(f"`target.{k}` must be a string")
    texts = [*(raw.get("paths") or []), *(raw.get("jsonPointers") or [])]
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("a rule needs `paths` and/or `jsonPointers`, lists of strings")
    mode = raw.get("mode", IF_OWNED)
    if mode not in MODES:
        shown = repr(mode) if isinstance(mode, str) else f"a {type(mode).__name__}"  # never a whole structure
        raise ValueError(f"`mode` must be one of {list(MODES)}, not {shown}")
    selector = Selector(
        group=str(target.get("group", "*")),
        kind=str(target.get("kind", "*")),
        namespace=str(target.get("namespace", "*")),
        name=str(target.get("name", "*")),
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
    )
    return IgnoreRule(selector, tuple(parse_path(t) for t in texts), str(mode), name)


@dataclass
class Applied:
    """A target's apply body after the rules, and the fields they kept from Git."""

    manifest: Manifest
    ignored: list[Ignored] = field(default_factory=list)


def apply_rules(
    key: ObjectKey, manifest: Manifest, live: Manifest | None, rules: Sequence[IgnoreRule], field_manager: str
) -> Applied:
    """`manifest` with the ignored fields left out (or set to their live value, `always`); a copy when changed.

    A new object (no `live`) is created with Git's values: there is nobody to leave them to.
    """
    matching = [r for r in rules if r.selector.matches(key, manifest)]
    if live is None or not matching:
        return Applied(manifest)
    body, out = manifest, []
    for rule in matching:
        for path in rule.paths:
            desired = fieldpath.get(body, path)
            if desired is fieldpath.MISSING:
                continue
            value = fieldpath.get(live, path)
            holder = _other_owner(live, path, field_manager)
            if holder is None and rule.mode == IF_OWNED:
                continue
            if holder is None and value is not fieldpath.MISSING:
                body = _put(body, path, value)  # `always`, only we own it: keep the live value
            else:
                body = fieldpath.remove(body, path)
            live_value = None if value is fieldpath.MISSING else value
            if holder is None and fieldpath.canonical_json(desired) == fieldpath.canonical_json(live_value):
                continue
            out.append(
                Ignored(
                    path=path,
                    desired=desired,
                    live=live_value,
                    manager=holder.manager if holder else "",
                    operation=holder.operation if holder else "",
                    subresource=holder.subresource if holder else "",
                    actor=actors.describe(holder.manager, holder.operation, holder.subresource) if holder else "",
                    mode=rule.mode,
                    rule=rule.origin,
                )
            )
    return Applied(body, out)


def _other_owner(live: Manifest, path: str, field_manager: str) -> ownership.ManagedFieldsEntry | None:
    """Another manager owning `path`, its atomic ancestor or anything below it."""
    found = ownership.owners_excluding(live, path, manager=field_manager)
    if found:
        return found[0]
    below = (path + ".", path + "[")
    for entry in ownership.managed_fields(live):
        if entry.identity == (field_manager, "Apply", ""):
            continue
        if any(p.startswith(below) for p in entry.owned_paths):
            return entry
    return None


def _put(obj: Manifest, path: str, value: Any) -> Manifest:
    """A copy of `obj` with `value` at an existing `path` (maps and keyed list items); unchanged when absent."""
    out = copy.deepcopy(obj)
    node: Any = out
    elements = list(fieldpath.parse(path))
    for i, element in enumerate(elements):
        last = i == len(elements) - 1
        if isinstance(element, fieldpath.Field) and isinstance(node, dict) and element.name in node:
            if last:
                node[element.name] = copy.deepcopy(value)
                return out
            node = node[element.name]
        elif isinstance(element, fieldpath.Key) and isinstance(node, list):
            wanted = dict(element.items)
            match = [j for j, item in enumerate(node) if isinstance(item, dict) and _has(item, wanted)]
            if len(match) != 1:
                return obj
            if last:
                node[match[0]] = copy.deepcopy(value)
                return out
            node = node[match[0]]
        else:
            return obj
    return obj


def _has(item: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(fieldpath.canonical_json(item.get(k)) == v for k, v in wanted.items())  # key values: canonical JSON


def rules_for(flags: Iterable[IgnoreRule], root: Path, repo_root: Path | None) -> list[IgnoreRule]:
    """Every rule of a pass: the flags', then the repository file's."""
    return [*flags, *load_file(root, repo_root)]
