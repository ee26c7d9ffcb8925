"""What a rendered document must be to become a desired object: checked by the walker (_render.py) for every
document of a file or a tool's output, before the planner sees it.

Server-side apply needs apiVersion, kind and a fixed metadata.name as strings; labels, annotations and a
Secret's data must be maps of strings. Messages name keys and types, never values (a value may be a Secret's).
"""

from __future__ import annotations

from typing import Any

from gitops_sync.errors import RenderError
from gitops_sync.resource import DesiredObject, Manifest, ObjectKey, split_api_version


def is_list(value: dict[str, Any]) -> bool:
    """`kind: List`, or `FooList` with an `items` array (kinds ending in List are reserved for lists)."""
    kind = value.get("kind")
    if kind == "List":
        return isinstance(value.get("items"), list | None)
    return isinstance(kind, str) and kind.endswith("List") and isinstance(value.get("items", False), list)


def object_label(value: Any) -> str | None:
    """`Kind/name` (or whichever is known) for error messages; only strings, never a nested value."""
    if not isinstance(value, dict):
        return None
    meta = value.get("metadata")
    name = meta.get("name") or meta.get("generateName") if isinstance(meta, dict) else None
    parts = [p[:253] for p in (value.get("kind"), name) if isinstance(p, str) and p]
    return "/".join(parts) or None


# Maps of strings checked here, by (group, kind): the API server would reject them too, but its message
# (or a stage before it) could quote a Secret's value.
_STRING_MAPS = {("", "Secret"): ("data", "stringData")}


def validate(value: Any, where: str) -> Manifest:
    """What server-side apply needs: apiVersion, kind and a fixed metadata.name, as strings; labels,
    annotations and Secret data as maps of strings. Messages name keys and types, never values."""
    if not isinstance(value, dict):
        raise RenderError(f"expected a Kubernetes object (a mapping), found {_type_name(value)}", file=where)
    problems = [f"missing {f}" for f in ("apiVersion", "kind") if not _non_empty_str(value.get(f))]
    meta = value.get("metadata")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        problems.append(f"metadata must be a mapping (found {_type_name(meta)})")
    else:
        if not _non_empty_str(meta.get("name")) and not generated_hook(value):
            problems.append(_name_problem(meta))
        if not isinstance(meta.get("namespace") or "", str):
            problems.append(f"metadata.namespace must be a string (found {_type_name(meta.get('namespace'))})")
        for name in ("labels", "annotations"):
            problems += _string_map_problems(meta.get(name), f"metadata.{name}")
    api_version, kind = value.get("apiVersion"), value.get("kind")
    if isinstance(api_version, str) and isinstance(kind, str):
        for name in _STRING_MAPS.get((split_api_version(api_version)[0], kind), ()):
            problems += _string_map_problems(value.get(name), name)
    if problems:
        raise RenderError("; ".join(problems), file=where, obj=object_label(value))
    return value


def _string_map_problems(value: Any, what: str) -> list[str]:
    """A map of string keys to string values (null: absent, as the API server reads it)."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return [f"{what} must be a mapping of strings (found {_type_name(value)})"]
    wrong = [
        f"{what}.{key} must be a string (found {_type_name(v)})"
        for key, v in value.items()
        if not isinstance(v, str) and v is not None
    ]
    if len(wrong) > 3:
        wrong[3:] = [f"and {len(wrong) - 3} more in {what}"]
    return wrong


def _type_name(value: Any) -> str:
    """What a value is, in YAML's words (never the value itself: it may be a Secret's)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def generated_hook(value: Any) -> bool:
    """A Helm hook (helm.sh/hook) named by metadata.generateName and no name: created, never applied
    (engine/hooks.py), so the one kind of object that may do without a fixed name."""
    meta = value.get("metadata") if isinstance(value, dict) else None
    if not isinstance(meta, dict) or meta.get("name") or not _non_empty_str(meta.get("generateName")):
        return False
    annotations = meta.get("annotations")
    return isinstance(annotations, dict) and _non_empty_str(annotations.get("helm.sh/hook"))


def _name_problem(meta: dict[str, Any]) -> str:
    if meta.get("generateName"):
        return "metadata.generateName is not supported (but on Helm hooks): apply needs a fixed metadata.name"
    if meta.get("name") not in (None, ""):
        return "metadata.name must be a string"
    return "missing metadata.name"


def _non_empty_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def unique(objects: list[DesiredObject]) -> list[DesiredObject]:
    """Two manifests for one object would fight each other on every sync: refuse, naming both places."""
    seen: dict[ObjectKey, DesiredObject] = {}
    for obj in objects:
        if generated_hook(obj.manifest):
            continue  # a Helm hook named by generateName: a new object each time it runs, never one of these
        first = seen.setdefault(obj.key, obj)
        if first is not obj:
            raise RenderError(
                f"duplicate object {obj.key}: also defined in {first.origin}",
                file=obj.origin,
                obj=object_label(obj.manifest),
            )
    return objects
