"""Read a kustomization tree before `kubectl kustomize` runs it: what may it reach, what must it not echo.

kustomize fetches remote bases (URLs, `git::`, `github.com/…` refs) and reads any directory a
`resources:` entry names, `../../..` and absolute paths included. A repository is not trusted to make
the reconciler fetch from the network or read the host's files, so every path entry of every
kustomization reachable from the rendered one (bases and components, recursively) must stay inside the
repository and none may be remote, unless the user allows it (`--kustomize-allow-external`).
The same walk collects the secretGenerator values (literals, env files, files) so the tool's error
output can be redacted before it reaches a message (see _tools.redact).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitops_sync.errors import RenderError
from gitops_sync.render._yaml import CONFIG_MAX_BYTES, load_config

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
_FLAG = "--kustomize-allow-external"
_SCHEME = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|git::|gh:|git@|ssh:)")
_HOST_LIKE = re.compile(r"^[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?::\d+)?/")  # github.com/org/repo
# Entries that name files or directories kustomize reads: lists of paths, lists of objects with a path.
_PATH_LISTS = (
    "resources",
    "bases",
    "components",
    "crds",
    "configurations",
    "generators",
    "transformers",
    "validators",
    "patchesStrategicMerge",
)
_OBJECT_PATHS = ("patches", "patchesJson6902", "replacements")
_GENERATORS = ("configMapGenerator", "secretGenerator")


def check(
    directory: Path,
    boundary: Path,
    *,
    allow_external: bool = False,
    check: Callable[[Path, str], None] = lambda target, name: None,
) -> frozenset[str]:
    """Raise a RenderError naming the kustomization file and entry for a remote or outside reference;
    return the secretGenerator values found on the way (to redact from the tool's output).

    `check(target, kustomization file)` is called on every local path an entry names (it may raise: a
    submodule whose files are not there, see RenderOptions.holes)."""
    return frozenset(walk(directory, boundary, allow_external=allow_external, check=check).secrets)


def walk(
    directory: Path,
    boundary: Path,
    *,
    allow_external: bool = False,
    check: Callable[[Path, str], None] = lambda target, name: None,
) -> _Walk:
    """`check`'s walk: also every file an entry names (`files`: its resolved path -> (entry key, kustomization
    file)), for the SOPS-encrypted inputs render/sops_inputs.py decrypts."""
    found = _Walk(boundary, allow_external, check)
    found.visit(directory.resolve())
    return found


@dataclass
class _Walk:
    boundary: Path
    allow_external: bool
    check: Callable[[Path, str], None]
    secrets: set[str] = field(default_factory=set)
    seen: set[Path] = field(default_factory=set)
    files: dict[Path, tuple[str, str]] = field(default_factory=dict)

    def visit(self, directory: Path) -> None:
        if directory in self.seen:
            return
        self.seen.add(directory)
        file = next((directory / n for n in KUSTOMIZATION_FILES if (directory / n).is_file()), None)
        if file is None:
            return  # kustomize itself says what is missing
        name = self._name(file)
        doc = load_config(file, name, "a kustomization") or {}
        for key in _PATH_LISTS:
            for entry in _strings(doc.get(key)):
                if key in ("patchesStrategicMerge", "generators", "transformers", "validators") and _inline(entry):
                    continue  # an inline patch or plugin configuration, not a path
                target = self._reference(directory, entry, name, key)
                if target is not None and target.is_dir():
                    self.visit(target)
        for key in _OBJECT_PATHS:
            for item in _mappings(doc.get(key)):
                path = item.get("path")
                if isinstance(path, str):
                    self._reference(directory, path, name, f"{key}.path")
        openapi = doc.get("openapi")
        if isinstance(openapi, dict) and isinstance(openapi.get("path"), str):
            self._reference(directory, openapi["path"], name, "openapi.path")
        for key in _GENERATORS:
            for gen in _mappings(doc.get(key)):
                self._generator(directory, gen, name, key, secret=key == "secretGenerator")
        for chart in _mappings(doc.get("helmCharts")):
            if isinstance(chart.get("repo"), str):
                self._reference(directory, chart["repo"], name, "helmCharts.repo", remote_only=True)
            values = chart.get("valuesFile")
            for entry in [
                *([values] if isinstance(values, str) else []),
                *_strings(chart.get("additionalValuesFiles")),
            ]:
                self._reference(directory, entry, name, "helmCharts.valuesFile")
        globals_ = doc.get("helmGlobals")
        if isinstance(globals_, dict) and isinstance(globals_.get("chartHome"), str):
            self._reference(directory, globals_["chartHome"], name, "helmGlobals.chartHome")

    def _generator(self, directory: Path, gen: dict[str, Any], name: str, key: str, *, secret: bool) -> None:
        for literal in _strings(gen.get("literals")):
            if secret:
                self.secrets.add(literal)
                self.secrets.add(literal.partition("=")[2])
        env = gen.get("env")
        envs = [*_strings(gen.get("envs")), *([env] if isinstance(env, str) else [])]
        for entry in envs:
            target = self._reference(directory, entry, name, f"{key}.envs")
            if secret and target is not None:
                for line in _read_lines(target):
                    self.secrets.update((line, line.partition("=")[2]))
        for entry in _strings(gen.get("files")):
            path = entry.partition("=")[2] if "=" in entry else entry
            target = self._reference(directory, path, name, f"{key}.files")
            if secret and target is not None:
                self.secrets.update(_read_lines(target))

    def _reference(self, directory: Path, entry: str, name: str, key: str, *, remote_only: bool = False) -> Path | None:
        """The local path an entry names (None for a remote one that is allowed, or a missing one);
        raises for a remote entry or a path leaving the repository unless external references are allowed."""
        entry = entry.strip()
        local = directory / entry
        if _remote(entry, local):
            if not self.allow_external:
                raise RenderError(
                    f"{key} entry {entry!r} is a remote reference: kustomize would fetch it from the network; "
                    f"only paths inside the repository are allowed (pass {_FLAG} to allow it)",
                    file=name,
                )
            return None
        if remote_only:
            return None
        try:
            target = local.resolve()
        except (OSError, RuntimeError):  # a symlink loop
            raise RenderError(f"{key} entry {entry!r} cannot be resolved (symlink loop?)", file=name) from None
        if not target.is_relative_to(self.boundary) and not self.allow_external:
            raise RenderError(
                f"{key} entry {entry!r} leads outside the repository (to {target}); pass {_FLAG} to allow it",
                file=name,
            )
        self.check(target, name)
        if target.is_file():
            self.files.setdefault(target, (key, name))
        return target if target.exists() else None

    def _name(self, file: Path) -> str:
        return file.relative_to(self.boundary).as_posix() if file.is_relative_to(self.boundary) else str(file)


def _remote(entry: str, local: Path) -> bool:
    """As kustomize decides: an existing local path is local; a URL, a git ref or `host.tld/…` is remote."""
    if _SCHEME.match(entry):
        return True
    if local.exists():
        return False
    return bool(_HOST_LIKE.match(entry)) or "?ref=" in entry or "?version=" in entry


def _inline(entry: str) -> bool:
    return "\n" in entry or entry.lstrip().startswith(("{", "[")) or ": " in entry


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, list):
        yield from (v for v in value if isinstance(v, str))


def _mappings(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, list):
        yield from (v for v in value if isinstance(v, dict))


def _read_lines(path: Path) -> set[str]:
    """The non-empty lines of a small file (and the whole text), for redaction only."""
    try:
        with path.open("rb") as handle:
            text = handle.read(CONFIG_MAX_BYTES).decode(errors="replace")
    except OSError:
        return set()
    lines = {ln.strip() for ln in text.splitlines() if ln.strip()}
    return lines | ({text.strip()} if text.strip() else set())
