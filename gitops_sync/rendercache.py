"""Rendered sources keyed by what decides them, so that a re-sync of the same files skips the render.

The key: for the files of a commit (a fetched or pinned revision, materialised read-only in the clone
cache), the Git tree of the rendered path (the whole commit's tree when the path holds a kustomization or
a symlink, which may read elsewhere in the repository); for a plain directory or a work tree (dirty or
not), a SHA-256 digest of every file's path and content under the rendered directory (and under the
repository's top for a kustomization, a chart or a symlink), read on every run — the render of 1,000
objects costs ~0.1 s, their digest ~1 ms. Then the path, the render options, the versions of the tools the
path needs (kubectl for kustomize, helm for charts), the content of every --helm-values file, and
gitops-sync's own version. A kustomization rendered with --kustomize-allow-external may read remote bases
and outside paths: never cached; nor is a directory past the digest's bounds (64 MiB, 20,000 files).

Two stores: on disk for the CLI (`<clone cache>/renders/`, one file per key, written aside and renamed into
place, a SHA-256 digest of the content checked on every read — a corrupt or foreign entry is a miss and is
rewritten — and the least recently used entries dropped past `max_entries`), in memory for the daemon.
The objects go on to the engine exactly as `render` returned them (copies: a caller may change them).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from gitops_sync import __version__, jsoncodec
from gitops_sync.log import get_logger
from gitops_sync.render import RenderOptions
from gitops_sync.resource import DesiredObject
from gitops_sync.source import Checkout

log = get_logger(__name__)

FORMAT = 1  # of the key and the entry; a change makes every old entry a miss
_KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
_SYMLINK_MODE = "120000"

Render = Callable[[Path, RenderOptions], list[DesiredObject]]


class Store(Protocol):
    def get(self, key: str) -> list[DesiredObject] | None: ...

    def put(self, key: str, objects: list[DesiredObject]) -> None: ...


class MemoryStore:
    """The daemon's store: the last `max_entries` renders, least recently used dropped first. Two by default:
    the commit being reconciled and the one before it (a revert); an entry is ~0.35 MB per 1,000 objects of
    the bench workload, and the daemon's memory budget is tight (BENCHMARKS.md, case 5)."""

    def __init__(self, max_entries: int = 2) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> list[DesiredObject] | None:
        with self._lock:
            data = self._entries.get(key)
            if data is not None:
                self._entries.move_to_end(key)
        return None if data is None else _decode(data, key)

    def put(self, key: str, objects: list[DesiredObject]) -> None:
        data = _encode(objects, key)
        if data is None:
            return
        with self._lock:
            self._entries[key] = data
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)


class DiskStore:
    """The CLI's store: `<directory>/<key>.json`, `<sha256 of the payload>\\n<payload>` each."""

    def __init__(self, directory: Path, max_entries: int = 32) -> None:
        self.directory = directory
        self.max_entries = max_entries

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> list[DesiredObject] | None:
        path = self._path(key)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        digest, _, payload = raw.partition(b"\n")
        if hashlib.sha256(payload).hexdigest().encode() != digest:
            log.warning("render cache: ignoring a corrupt entry (it is rewritten)", entry=str(path))
            return None
        objects = _decode(payload, key)
        if objects is not None:
            with contextlib.suppress(OSError):
                os.utime(path)  # recently used: pruning keeps it
        return objects

    def put(self, key: str, objects: list[DesiredObject]) -> None:
        payload = _encode(objects, key)
        if payload is None:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
                os.replace(tmp, self._path(key))  # atomic: a reader sees the old entry or the whole new one
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            self._prune()
        except OSError as exc:  # a cache that cannot be written costs a render next time, nothing more
            log.warning("render cache: cannot write an entry", directory=str(self.directory), error=str(exc))

    def _prune(self) -> None:
        entries = []
        for entry in os.scandir(self.directory):
            if entry.name.endswith(".json") and not entry.name.startswith("."):
                with contextlib.suppress(OSError):
                    entries.append((entry.stat().st_mtime, entry.path))
        for _, path in sorted(entries, reverse=True)[self.max_entries :]:
            with contextlib.suppress(OSError):
                os.unlink(path)


class RenderCache:
    """`render` through a store, for the files of a commit; everything else is rendered every time."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.hits = 0
        self.misses = 0

    def render(self, checkout: Checkout, opts: RenderOptions, render: Render) -> list[DesiredObject]:
        key = self.key(checkout, opts)
        if key is None:
            return render(checkout.root, opts)
        cached = self.store.get(key)
        if cached is not None:
            self.hits += 1
            log.info("render cache: served", revision=checkout.revision, objects=len(cached))
            return cached
        self.misses += 1
        objects = render(checkout.root, opts)
        self.store.put(key, objects)
        return objects

    def key(self, checkout: Checkout, opts: RenderOptions) -> str | None:
        """The entry's name, or None when this render cannot be cached (a kustomization that may read remote
        bases, git that cannot tell a commit's tree, a directory too large to digest)."""
        found = _commit_files(checkout) if _is_commit(checkout) else _directory_files(checkout, opts)
        if found is None:
            return None
        source, names = found
        uses_kustomize = any(n in _KUSTOMIZATION_FILES for n in names)
        if uses_kustomize and opts.kustomize_allow_external:
            return None  # remote bases and outside paths change without a commit: the files do not decide
        uses_helm = "Chart.yaml" in names
        parts = {
            "format": FORMAT,
            "gitops-sync": __version__,
            "source": source,
            "options": {k: str(v) for k, v in sorted(asdict(opts).items()) if k not in ("repo_root", "helm_values")},
            "tools": tool_versions(opts, kustomize=uses_kustomize, helm=uses_helm),
            "values": _values_digests(opts.helm_values, opts.repo_root) if uses_helm else [],
        }
        return hashlib.sha256(jsoncodec.dumps(parts)).hexdigest()[:40]


def _is_commit(checkout: Checkout) -> bool:
    """The files of a commit (fetched or pinned, materialised in the clone cache), not a directory as it is."""
    return checkout.git_dir is not None and checkout.git_path is not None and bool(checkout.revision)


def _commit_files(checkout: Checkout) -> tuple[dict[str, str], set[str]] | None:
    """What decides the render of a commit's files: the Git tree of the path (and the whole commit's tree
    when the path holds a kustomization or a symlink, which may read elsewhere in the repository); None when
    git cannot tell."""
    if checkout.git_dir is None or checkout.git_path is None:
        return None
    try:
        tree, listing = _tree(checkout.git_dir, checkout.revision, checkout.git_path)
        names = {line.rpartition("\t")[2].rpartition("/")[2] for line in listing}
        reaches_out = any(n in _KUSTOMIZATION_FILES for n in names) or any(
            line.startswith(_SYMLINK_MODE) for line in listing
        )
        whole = _git(checkout.git_dir, "rev-parse", f"{checkout.revision}^{{tree}}") if reaches_out else ""
    except (OSError, subprocess.SubprocessError):
        return None
    return {"tree": tree, "commit-tree": whole, "path": checkout.git_path}, names


def _directory_files(checkout: Checkout, opts: RenderOptions) -> tuple[dict[str, str], set[str]] | None:
    """What decides the render of a plain directory or a work tree (dirty or not): the content of every file
    under the rendered directory, and under the repository's top too when the directory holds a
    kustomization, a chart or a symlink (they may read elsewhere in it). Read whole and digested: a file
    changed within the same second and size is still seen (mtimes would not)."""
    root = checkout.root
    inner = _digest_files(root)
    if inner is None:
        return None
    digest, names, has_symlink = inner
    top = opts.repo_root or root
    outer = ""
    if top != root and (has_symlink or names & {*_KUSTOMIZATION_FILES, "Chart.yaml"}):
        whole = _digest_files(top)
        if whole is None:
            return None
        outer = whole[0]
    return {"content": digest, "top-content": outer, "path": str(root), "top": str(top)}, names


# A directory is digested for the key only up to these bounds (beyond them it is rendered every time): the
# digest must stay far cheaper than the render it saves.
_DIGEST_MAX_BYTES = 64 * 1024 * 1024
_DIGEST_MAX_FILES = 20_000


def _digest_files(top: Path) -> tuple[str, set[str], bool] | None:
    """SHA-256 over every file's path, kind and content under `top` (`.git` skipped, symlinks not followed:
    their targets are digested as text); the file names seen; whether a symlink is among them. None past
    the bounds or when something cannot be read."""
    h = hashlib.sha256()
    names: set[str] = set()
    has_symlink = False
    total = files = 0
    try:
        for directory, dirs, entries in os.walk(top, onerror=_raise):  # symlinked directories: not entered
            dirs[:] = sorted(d for d in dirs if d != ".git")
            rel = os.path.relpath(directory, top)
            for name in sorted({*entries, *dirs}):
                path = os.path.join(directory, name)
                if name not in dirs:
                    names.add(name)
                if os.path.islink(path):
                    has_symlink = True
                    h.update(b"L\0" + os.path.join(rel, name).encode() + b"\0" + os.readlink(path).encode() + b"\0")
                    continue
                if name in dirs:
                    continue
                files += 1
                with open(path, "rb") as handle:
                    data = handle.read(_DIGEST_MAX_BYTES - total + 1)
                total += len(data)
                if total > _DIGEST_MAX_BYTES or files > _DIGEST_MAX_FILES:
                    return None
                h.update(b"F\0" + os.path.join(rel, name).encode() + b"\0" + str(len(data)).encode() + b"\0")
                h.update(data)
    except OSError:
        return None
    return h.hexdigest(), names, has_symlink


def _raise(error: OSError) -> None:
    raise error


def tool_versions(opts: RenderOptions, *, kustomize: bool, helm: bool) -> dict[str, str]:
    """`kubectl version --client` / `helm version` of the binaries the render would run (a new tool
    version may render the same tree differently)."""
    out: dict[str, str] = {}
    if kustomize:
        out["kubectl"] = _version([opts.kubectl, "version", "--client", "-o", "json"])
    if helm:
        out["helm"] = _version([opts.helm, "version", "--short"])
    return out


def _version(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable: {type(exc).__name__}"  # the render itself reports the missing tool
    return hashlib.sha256(done.stdout).hexdigest()


def _values_digests(values: Sequence[Path], repo_root: Path | None) -> list[str]:
    """SHA-256 of every --helm-values file where the render may look for it (cwd first, then the repository)."""
    out = []
    for given in values:
        candidates = (
            [given] if given.is_absolute() else [Path.cwd() / given, *([repo_root / given] if repo_root else [])]
        )
        for path in candidates:
            try:
                out.append(f"{path}:{hashlib.sha256(path.read_bytes()).hexdigest()}")
            except OSError:
                out.append(f"{path}:absent")
    return out


def _tree(git_dir: Path, revision: str, path: str) -> tuple[str, list[str]]:
    """The tree of `path` at `revision`, and its recursive listing (`<mode> <type> <sha>\\t<path>` lines)."""
    spec = f"{revision}:{path}"
    tree = _git(git_dir, "rev-parse", spec)
    listing = _git(git_dir, "ls-tree", "-r", tree).splitlines()
    return tree, listing


def _git(git_dir: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def _encode(objects: list[DesiredObject], key: str) -> bytes | None:
    """The entry's payload, or None when JSON would not give back exactly these objects (non-string map
    keys, values JSON has no type for): such a source is rendered every time."""
    doc: dict[str, Any] = {"key": key, "objects": [[o.origin, o.manifest, o.extra] for o in objects]}
    try:
        payload = jsoncodec.dumps(doc)
        if jsoncodec.loads(payload) != doc:
            return None
    except (TypeError, ValueError):
        return None
    return payload


def _decode(payload: bytes, key: str) -> list[DesiredObject] | None:
    try:
        doc = jsoncodec.loads(payload)
        if not isinstance(doc, dict) or doc.get("key") != key:
            return None
        return [DesiredObject(manifest, origin, extra) for origin, manifest, extra in doc["objects"]]
    except (ValueError, TypeError, KeyError):
        return None
