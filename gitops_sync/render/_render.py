"""Walk a directory tree and turn its manifests, kustomizations and charts into desired objects.

Everything here is local and deterministic: no namespace defaulting, no cluster look-ups (the planner
does those with discovery), so `render` gives the same objects for the same tree on any machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitops_sync.errors import RenderError
from gitops_sync.render import _tools
from gitops_sync.render._yaml import load_json, load_yaml
from gitops_sync.resource import DesiredObject, Manifest, ObjectKey

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class RenderOptions:
    """How to render; the defaults suit a plain repository of manifests."""

    helm_values: tuple[Path, ...] = ()  # extra values files for every chart (relative: from repo_root)
    helm_release: str | None = None  # default: the chart directory's name
    namespace: str = "default"  # passed to `helm template --namespace`
    kubectl: str = "kubectl"  # binary for `kubectl kustomize`
    helm: str = "helm"
    max_file_bytes: int = 10 * 1024 * 1024
    max_yaml_nodes: int = 1_000_000  # bound on nodes after alias expansion
    # The repository's top: symlinks may not lead out of it, relative values files start from it.
    # None: the rendered root itself (pass Checkout.repo_root when rendering a --path sub-directory).
    repo_root: Path | None = None
    tool_timeout: float = 300  # seconds for one `kubectl kustomize` / `helm template`


def render(root: Path, options: RenderOptions | None = None) -> list[DesiredObject]:
    """All desired objects under `root`, in walk order; raises RenderError naming the file and object."""
    opts = options or RenderOptions()
    if not root.is_dir():
        raise RenderError("not a directory", file=str(root))
    walker = _Walker(root, opts)
    walker.walk(root, "", frozenset())
    return _unique(walker.objects)


@dataclass
class _Walker:
    root: Path
    opts: RenderOptions
    objects: list[DesiredObject] = field(default_factory=list)
    boundary: Path = field(init=False)

    def __post_init__(self) -> None:
        self.boundary = (self.opts.repo_root or self.root).resolve()
        if not self.root.resolve().is_relative_to(self.boundary):
            raise RenderError(f"the rendered directory is outside the repository {self.boundary}", file=str(self.root))

    def walk(self, directory: Path, rel: str, ancestors: frozenset[Path]) -> None:
        """Sorted, depth-first; a kustomization or chart directory is rendered whole by its tool."""
        real = directory.resolve()
        if real in ancestors:
            raise RenderError("symlink loop: the directory contains itself", file=rel or ".")
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as err:
            raise RenderError(f"cannot read the directory: {err.strerror}", file=rel or ".") from None
        names = {e.name for e in entries}
        kustomization = next((n for n in KUSTOMIZATION_FILES if n in names), None)
        if kustomization is not None or "Chart.yaml" in names:
            self._check_tree_links(directory, rel)
            tool = "kustomize" if kustomization is not None else "helm"
            label = f"{rel or '.'} ({tool})"
            output = self._kustomize(directory, label) if tool == "kustomize" else self._helm(directory, label)
            for number, value in load_yaml(output, label, self.opts.max_yaml_nodes):
                self._add(value, label, f"{label}#{number}")
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue  # .git, .github, editor files: never desired state
            path = Path(entry.path)
            entry_rel = f"{rel}/{entry.name}" if rel else entry.name
            is_manifest = entry.name.lower().endswith(MANIFEST_SUFFIXES)
            if entry.is_symlink() and (is_manifest or entry.is_dir()):
                self._check_link(path, entry_rel)
            if entry.is_dir():
                self.walk(path, entry_rel, ancestors | {real})
            elif is_manifest and entry.is_file():
                self._load_file(path, entry_rel)

    def _check_link(self, path: Path, rel: str) -> None:
        target = path.resolve()
        if not target.is_relative_to(self.boundary):
            raise RenderError(f"symlink leads outside the repository (to {target})", file=rel)
        if not target.exists():
            raise RenderError(f"broken symlink (to {target})", file=rel)

    def _check_tree_links(self, directory: Path, rel: str) -> None:
        """kustomize and helm read whatever files they like: every symlink below must stay inside."""
        for top, dirs, files in os.walk(directory):
            dirs[:] = [d for d in dirs if d != ".git"]
            for name in dirs + files:
                path = Path(top, name)
                if path.is_symlink():
                    inner = path.relative_to(directory).as_posix()
                    self._check_link(path, f"{rel}/{inner}" if rel else inner)

    def _load_file(self, path: Path, rel: str) -> None:
        limit = self.opts.max_file_bytes
        too_big = RenderError(f"file is larger than the {limit}-byte limit", file=rel)
        try:
            if path.stat().st_size > limit:
                raise too_big
            with path.open("rb") as handle:
                data = handle.read(limit + 1)  # bounded even if the file grows after stat()
        except OSError as err:
            raise RenderError(f"cannot read: {err.strerror}", file=rel) from None
        if len(data) > limit:
            raise too_big
        if rel.lower().endswith(".json"):
            docs = load_json(data, rel)
        else:
            docs = load_yaml(data, rel, self.opts.max_yaml_nodes)
        for number, value in docs:
            origin = f"{rel}#{number}"
            self._add(value, origin, origin)

    def _add(self, value: Any, origin: str, where: str) -> None:
        """Expand `kind: List` (and `*List` with items), validate, collect."""
        if isinstance(value, dict) and _is_list(value):
            for index, item in enumerate(value.get("items") or []):
                item_where = f"{where} items[{index}]"
                # A file's items get their own origin; a tool's output keeps `<dir> (tool)`.
                self._add(item, item_where if origin == where else origin, item_where)
            return
        self.objects.append(DesiredObject(_validate(value, where), origin))

    def _kustomize(self, directory: Path, label: str) -> str:
        return _tools.kustomize(self.opts.kubectl, directory, label, self.opts.tool_timeout)

    def _helm(self, directory: Path, label: str) -> str:
        values: list[Path] = []
        for given in self.opts.helm_values:
            path = given if given.is_absolute() else self.boundary / given
            if not path.is_file():
                raise RenderError(f"values file {given} does not exist (looked at {path})", file=label)
            values.append(path)
        release = self.opts.helm_release or directory.resolve().name
        return _tools.helm_template(
            self.opts.helm, directory, release, self.opts.namespace, values, label, self.opts.tool_timeout
        )


def _is_list(value: dict[str, Any]) -> bool:
    """`kind: List`, or `FooList` with an `items` array (kinds ending in List are reserved for lists)."""
    kind = value.get("kind")
    if kind == "List":
        return isinstance(value.get("items"), list | None)
    return isinstance(kind, str) and kind.endswith("List") and isinstance(value.get("items", False), list)


def _label(value: Any) -> str | None:
    """`Kind/name` (or whichever is known) for error messages."""
    if not isinstance(value, dict):
        return None
    meta = value.get("metadata")
    name = meta.get("name") or meta.get("generateName") if isinstance(meta, dict) else None
    parts = [str(p) for p in (value.get("kind"), name) if p]
    return "/".join(parts) or None


def _validate(value: Any, where: str) -> Manifest:
    """What server-side apply needs: apiVersion, kind and a fixed metadata.name, as strings."""
    if not isinstance(value, dict):
        found = "a list" if isinstance(value, list) else type(value).__name__
        raise RenderError(f"expected a Kubernetes object (a mapping), found {found}", file=where)
    problems = [f"missing {f}" for f in ("apiVersion", "kind") if not _non_empty_str(value.get(f))]
    meta = value.get("metadata")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        problems.append("metadata must be a mapping")
    else:
        if not _non_empty_str(meta.get("name")):
            problems.append(_name_problem(meta))
        if not isinstance(meta.get("namespace") or "", str):
            problems.append("metadata.namespace must be a string")
    if problems:
        raise RenderError("; ".join(problems), file=where, obj=_label(value))
    return value


def _name_problem(meta: dict[str, Any]) -> str:
    if meta.get("generateName"):
        return "metadata.generateName is not supported: apply needs a fixed metadata.name"
    if meta.get("name") not in (None, ""):
        return "metadata.name must be a string"
    return "missing metadata.name"


def _non_empty_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _unique(objects: list[DesiredObject]) -> list[DesiredObject]:
    """Two manifests for one object would fight each other on every sync: refuse, naming both places."""
    seen: dict[ObjectKey, DesiredObject] = {}
    for obj in objects:
        first = seen.setdefault(obj.key, obj)
        if first is not obj:
            raise RenderError(
                f"duplicate object {obj.key}: also defined in {first.origin}", file=obj.origin, obj=_label(obj.manifest)
            )
    return objects
