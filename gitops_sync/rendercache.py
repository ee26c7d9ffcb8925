"""Rendered sources keyed by what decides them, so that a re-sync of the same files skips the render.

The key: for the files of a commit (a fetched or pinned revision, materialised read-only in the clone
cache), the Git tree of the rendered path (the whole commit's tree when the path holds a kustomization or
a symlink, which may read elsewhere in the repository); for a plain directory or a work tree (dirty or
not), a SHA-256 digest of every entry's path and content under the rendered directory (under the
repository's top instead for a kustomization, a chart or a symlink), read on every run — the render of
1,000 objects costs ~0.1 s, their digest ~1 ms. Then the path, the render options, the versions of the tools
the path needs (kubectl for kustomize, helm for charts), the content of the user's own --helm-values files,
and gitops-sync's own version. A kustomization rendered with --kustomize-allow-external may read remote
bases and outside paths: never cached; nor is a directory past the digest's bounds (64 MiB, 20,000 files).

The entry is the render of exactly the bytes the key was computed from. A directory is read once into a
Snapshot (render/snapshot.py) that is digested and then rendered: from memory for plain manifests, from a
private copy written from it for kustomize, helm and symlinks (the tools read a directory themselves). A
file rewritten in place while it is read (truncate, then the same bytes) is either in the snapshot whole
or empty in both the key and the render, never empty in the render of the complete tree's key. A
directory merely digested before the render reads it again would not do: the file is back to the same
bytes after the render, so a second digest agrees with the first and the short render would be stored.

Two stores: on disk for the CLI (`<clone cache>/renders/`, one file per key, written aside and renamed into
place, a SHA-256 digest of the content checked on every read — a corrupt or foreign entry is a miss and is
rewritten — and the least recently used entries dropped past `max_entries`), in memory for the daemon.
The objects go on to the engine exactly as `render` returned them (copies: a caller may change them).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from gitops_sync import __version__, jsoncodec
from gitops_sync.errors import RenderError
from gitops_sync.log import get_logger
from gitops_sync.render import RenderOptions, Snapshot, resolve_chart_sources, sops
from gitops_sync.render.charts import CHART_SOURCE_FILE
from gitops_sync.render.snapshot import read as read_snapshot
from gitops_sync.resource import DesiredObject
from gitops_sync.source import Checkout
from gitops_sync.source.safegit import safe_env

log = get_logger(__name__)

FORMAT = 2  # of the key and the entry; a change makes every old entry a miss
_KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
_SYMLINK_MODE = "120000"
# Render options the key leaves out: paths the key covers otherwise, and SOPS keys (a render that decrypted
# anything is never written to disk; in memory, a digest of the keys is part of the key: a GitSync's key
# Secret is read at every fetch, and a rotated or removed key must render anew), and a GitSync's chart
# credentials (never in a key: each pass resolves its charts with them before the look-up).
_NOT_IN_KEY = ("repo_root", "helm_values", "decryption", "chart_access")


class Store(Protocol):
    # True: the store is the process's memory, which holds the decrypted desired state anyway, so a render
    # that decrypted Secrets may be kept (keyed by the keys that decrypted it). False: it is the disk, which
    # never gets a decrypted Secret.
    in_memory: bool

    def get(self, key: str) -> list[DesiredObject] | None: ...

    def put(self, key: str, objects: list[DesiredObject]) -> None: ...

    def digest(self, key: str) -> str | None:
        """A digest of the entry's payload known without decoding it; None when there is no entry, or when
        the store cannot tell without reading it (disk)."""
        ...


class Unchanged(Exception):  # not an error: the answer of a look-up that found nothing new
    """The entry a render would be served from is the one the caller holds (`RenderCache.render`'s `held`)."""


class MemoryStore:
    """The daemon's store: the last `max_entries` renders, least recently used dropped first. Two by default:
    the commit being reconciled and the one before it (a revert). The payload is kept compressed (zlib, level
    1: 0.35 MB of JSON per 1,000 objects of the bench workload become ~0.03 MB), as the daemon's memory
    budget is tight (BENCHMARKS.md, cases 5 and 6); a hit is rare (the second look at a work tree, a revert).
    Each entry has a digest of its payload (`digest`): the daemon tells a render it holds from a new one
    without decoding it."""

    in_memory = True

    def __init__(self, max_entries: int = 2) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[bytes, str]] = OrderedDict()  # key -> (compressed payload, digest)
        self._lock = threading.Lock()

    def get(self, key: str) -> list[DesiredObject] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        return None if entry is None else _decode(zlib.decompress(entry[0]), key)

    def digest(self, key: str) -> str | None:
        """SHA-256 of the entry's payload (the objects as stored), None when there is no entry."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else entry[1]

    def put(self, key: str, objects: list[DesiredObject]) -> None:
        data = _encode(objects, key)
        if data is None:
            return
        with self._lock:
            self._entries[key] = (zlib.compress(data, 1), hashlib.sha256(data).hexdigest())
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)


class DiskStore:
    """The CLI's store: `<directory>/<key>.json`, `<sha256 of the payload>\\n<payload>` each."""

    in_memory = False

    def __init__(self, directory: Path, max_entries: int = 32) -> None:
        self.directory = directory
        self.max_entries = max_entries

    def digest(self, key: str) -> str | None:  # the CLI reads its entry anyway: nothing to tell beforehand
        return None

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


class Render(Protocol):
    """gitops_sync.render.render, or a stand-in for it."""

    def __call__(
        self, root: Path, options: RenderOptions | None = None, *, snapshot: Snapshot | None = None
    ) -> list[DesiredObject]: ...


class RenderCache:
    """`render` through a store, for the files of a commit or a directory; anything else is rendered every time.

    The entry stored under a key is the render of exactly what the key was computed from: a commit's files
    never change (materialised once, never edited), a directory is read once into a Snapshot that is both
    digested and rendered (render/snapshot.py), and --helm-values files are read once and rendered from
    private copies."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.hits = 0
        self.misses = 0
        # The payload digest of the MemoryStore entry the last render's objects are (served, or stored by it);
        # None when they are in no entry. One caller at a time (a daemon's source, on its worker).
        self.digest: str | None = None

    def render(
        self,
        checkout: Checkout,
        opts: RenderOptions,
        render: Render,
        held: Callable[[str, str], bool] | None = None,
    ) -> list[DesiredObject]:
        """The objects of this checkout. `held(revision, entry digest)`: True when the caller holds that
        entry's objects already; it raises Unchanged instead of decoding them (20,000 objects are ~50 MB)."""
        self.digest = None
        tree = None if _is_commit(checkout) else _read_directory(checkout, opts)
        found = _commit_files(checkout) if _is_commit(checkout) else tree and (tree.source, tree.names)
        keyed = self._key(found, opts) if found else None
        if keyed is None:
            return render(checkout.root, opts)
        key, values = keyed
        # Charts from repositories (helm-chart.yaml): a range or a tag resolves anew without a commit, so for a
        # commit the key holds what each resolves to now (its index/tag request; nothing pulled on a hit).
        resolved = bool(found and CHART_SOURCE_FILE in found[1] and _is_commit(checkout) and opts.chart_cache)
        if resolved:
            charts = resolve_chart_sources(checkout.root, opts)
            key = hashlib.sha256(jsoncodec.dumps([key, charts])).hexdigest()[:40]
        if self.store.in_memory and opts.decryption:
            key = hashlib.sha256(f"{key}\n{opts.decryption.fingerprint()}".encode()).hexdigest()[:40]
        entry = self.store.digest(key)
        if entry is not None and held is not None and held(checkout.revision, entry):
            self.hits += 1
            log.info("render cache: served", revision=checkout.revision, held=True)  # the state held: not decoded
            raise Unchanged(key)
        cached = self.store.get(key)
        if cached is not None:
            self.digest = entry
            self.hits += 1
            log.info("render cache: served", revision=checkout.revision, objects=len(cached))
            return cached
        self.misses += 1
        objects, storable = _render_once(checkout, opts, tree, values, render)
        # Chart.yaml dependencies, and helm-chart.yaml charts of a directory (not a commit): a version range or a
        # tag resolves anew on each pass and the key does not hold it: never stored (issue 24).
        pulled = any("chart_dependencies" in o.extra or ("chart" in o.extra and not resolved) for o in objects)
        # Decrypted Secrets never reach the disk; the daemon's memory holds them anyway (its desired state).
        if storable and not pulled and (self.store.in_memory or not sops.any_decrypted(objects)):
            self.store.put(key, objects)
            self.digest = self.store.digest(key)
        return objects

    def _key(self, found: tuple[dict[str, str], set[str]], opts: RenderOptions) -> tuple[str, list[_Value]] | None:
        """The entry's name and the --helm-values files as read for it, or None when this render cannot be
        cached (a kustomization that may read remote bases)."""
        source, names = found
        uses_kustomize = bool(names & set(_KUSTOMIZATION_FILES))
        if uses_kustomize and opts.kustomize_allow_external:
            return None  # remote bases and outside paths change without a commit: the files do not decide
        uses_helm = "Chart.yaml" in names
        # --helm-values apply to charts from repositories too (whose renders are never stored: no helm version)
        values = _read_values(opts.helm_values) if uses_helm or CHART_SOURCE_FILE in names else []
        parts = {
            "format": FORMAT,
            "gitops-sync": __version__,
            "source": source,
            "options": {k: str(v) for k, v in sorted(asdict(opts).items()) if k not in _NOT_IN_KEY},
            "tools": tool_versions(opts, kustomize=uses_kustomize, helm=uses_helm),
            "values": [v.part for v in values],
        }
        return hashlib.sha256(jsoncodec.dumps(parts)).hexdigest()[:40], values


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


# A directory is read for the key only up to these bounds (beyond them it is rendered every time): the
# digest must stay far cheaper than the render it saves, and the snapshot it keeps is held in memory.
_DIGEST_MAX_BYTES = 64 * 1024 * 1024
_DIGEST_MAX_FILES = 20_000


@dataclass(frozen=True)
class _Tree:
    """A plain directory or work tree as read once: the snapshot (of the rendered root, or of the
    repository's top when the root holds a kustomization, a chart or a symlink, which may read elsewhere in
    it), the rendered root inside it, the names under that root, and the key's part for it."""

    snapshot: Snapshot
    origin: Path  # the directory the snapshot was read from
    root: str  # the rendered root inside the snapshot ("" for the snapshot itself)
    names: set[str]
    source: dict[str, str]


def _read_directory(checkout: Checkout, opts: RenderOptions) -> _Tree | None:
    """What decides the render of a plain directory or a work tree (dirty or not): the content of every
    entry under the rendered directory, and under the repository's top instead when the directory holds a
    kustomization, a chart or a symlink. Read once, whole (a file changed within the same second and size
    is still seen, as mtimes would not), and what was read decides which of the two it is."""
    root = checkout.root
    top = opts.repo_root or root
    snap = _read(root)
    if snap is None:
        return None
    rel, origin, inner = "", root, snap
    if top != root and not snap.plain:
        try:
            inside = root.relative_to(top).as_posix()
        except ValueError:
            return None
        whole = _read(top)
        sub = whole.sub(inside) if whole is not None else None
        if whole is None or sub is None:
            return None
        inner = sub
        snap, rel, origin = (inner, "", root) if inner.plain else (whole, inside, top)
    part = {"content": snap.digest(), "region": "top" if rel else "root", "path": str(root), "top": str(top)}
    return _Tree(snap, origin, rel, inner.names, part)


def _read(directory: Path) -> Snapshot | None:
    return read_snapshot(directory, max_bytes=_DIGEST_MAX_BYTES, max_files=_DIGEST_MAX_FILES)


@dataclass(frozen=True)
class _Value:
    """A --helm-values file as read for the key: the user's own (absolute, or found in the current
    directory) with its content, or one the render looks up in the repository (whose files the key has)."""

    given: Path
    data: bytes | None  # None: not the user's own file (looked up in the repository, or absent)

    @property
    def part(self) -> str:
        found = "repository" if self.data is None else hashlib.sha256(self.data).hexdigest()
        return f"{self.given}:{found}"


def _read_values(values: Sequence[Path]) -> list[_Value]:
    """Each --helm-values file as the render picks it: absolute, else in the current directory, else in the
    repository (rendering/_render.py `_values_file`)."""
    out = []
    for given in values:
        path = given if given.is_absolute() else Path.cwd() / given
        try:
            data = path.read_bytes() if path.is_file() else None
        except OSError:
            data = None
        out.append(_Value(given, data))
    return out


def _render_once(
    checkout: Checkout, opts: RenderOptions, tree: _Tree | None, values: list[_Value], render: Render
) -> tuple[list[DesiredObject], bool]:
    """The render of what the key was computed from, and whether it may be stored under that key.

    A plain snapshot is rendered from memory. Anything kustomize or helm read themselves is rendered from a
    private copy: the snapshot written out (a commit's files need none: they never change), each
    --helm-values file of the user's written from the bytes read for the key. A private path in a render
    error would confuse: then the source is rendered as it is (the message names its own files), uncached.
    A copy that cannot be written: rendered as it is, uncached."""
    if tree is not None and tree.snapshot.plain:
        return render(checkout.root, opts, snapshot=tree.snapshot), True
    own = [v for v in values if v.data is not None]
    if tree is None and not own:
        return render(checkout.root, opts), True
    private = Path(tempfile.mkdtemp(prefix="gitops-sync-render-")).resolve()
    try:
        try:
            root, opts_private = _write_private(private, checkout, opts, tree, values)
        except OSError as exc:
            log.warning("render cache: cannot write a private copy; rendering uncached", error=str(exc))
            return render(checkout.root, opts), False
        try:
            return render(root, opts_private), True
        except RenderError as err:
            if str(private) not in str(err):
                raise
            return render(checkout.root, opts), False
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _write_private(
    private: Path, checkout: Checkout, opts: RenderOptions, tree: _Tree | None, values: list[_Value]
) -> tuple[Path, RenderOptions]:
    """The root to render and its options, with the snapshot and the user's values files under `private`."""
    given = []
    for number, value in enumerate(values):
        if value.data is None:
            given.append(value.given)
            continue
        copy = private / "values" / str(number) / value.given.name
        copy.parent.mkdir(parents=True)
        copy.write_bytes(value.data)
        given.append(copy)
    opts = replace(opts, helm_values=tuple(given))
    if tree is None:
        return checkout.root, opts
    base = private / "tree" / (tree.origin.name or "root")  # a chart's release is named after its directory
    base.parent.mkdir()
    tree.snapshot.write(base, tree.origin)
    return base / tree.root if tree.root else base, replace(opts, repo_root=base)


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


def _tree(git_dir: Path, revision: str, path: str) -> tuple[str, list[str]]:
    """The tree of `path` at `revision`, and its recursive listing (`<mode> <type> <sha>\\t<path>` lines)."""
    spec = f"{revision}:{path}"
    tree = _git(git_dir, "rev-parse", spec)
    listing = _git(git_dir, "ls-tree", "-r", tree).splitlines()
    return tree, listing


def _git(git_dir: Path, *args: str) -> str:
    env = {**os.environ, **safe_env()}  # a local repository's git dir: nothing it configures runs (safegit.py)
    done = subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, timeout=60, check=True, env=env
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
