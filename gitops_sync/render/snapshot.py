"""A directory's files read once, so that a render and the key it is cached under are of the same bytes.

A work tree is written to while it is read: an editor or a generator rewrites a file in place (truncate,
then write the same bytes), a build regenerates a directory. A render that reads the files again after
they were digested can catch one empty and key that render under the digest of the complete tree; a later
`sync --prune` of that very tree is then served the short render and deletes the missing objects
(gitops_sync/rendercache.py). So the render cache reads a directory once into a `Snapshot`, digests the
snapshot, and renders the snapshot: plain manifests straight from memory (the walker lists and reads the
snapshot, never the disk), a tree that kustomize or helm render, or one holding symlinks, from a private
copy written from the snapshot (`write`), since those tools read the directory themselves.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gitops_sync.render._kustomize import KUSTOMIZATION_FILES

TOOL_FILES = frozenset((*KUSTOMIZATION_FILES, "Chart.yaml", "helm-chart.yaml"))


@dataclass(frozen=True)
class Snapshot:
    """Paths are posix and relative to the directory read ("" is that directory). `.git` directories are
    left out; symlinks are recorded as written, never followed; anything that is neither a regular file, a
    directory nor a symlink (a FIFO, a socket) is recorded by name only, never opened."""

    files: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # each directory's entry names, sorted
    others: frozenset[str] = frozenset()

    @property
    def names(self) -> set[str]:
        """Every entry's name (files, directories, symlinks): what decides whether tools render it."""
        return {name for entries in self.dirs.values() for name in entries}

    @property
    def plain(self) -> bool:
        """Renderable from memory: no symlink to follow and nothing kustomize or helm would read itself."""
        return not self.links and not (self.names & TOOL_FILES)

    def digest(self) -> str:
        """SHA-256 of every entry's kind, path and content (a file's length first, so no two trees collide)."""
        h = hashlib.sha256()
        for directory in sorted(self.dirs):
            h.update(b"D\0" + _b(directory) + b"\0")
            for name in self.dirs[directory]:
                path = posixpath.join(directory, name)
                if path in self.links:
                    h.update(b"L\0" + _b(path) + b"\0" + _b(self.links[path]) + b"\0")
                elif path in self.files:
                    data = self.files[path]
                    h.update(b"F\0" + _b(path) + b"\0" + str(len(data)).encode() + b"\0")
                    h.update(data)
                elif path in self.others:
                    h.update(b"O\0" + _b(path) + b"\0")
        return h.hexdigest()

    def sub(self, rel: str) -> Snapshot | None:
        """The snapshot of the sub-directory `rel`, as `read` of it would have given; None if it is none."""
        if not rel:
            return self
        if rel not in self.dirs:
            return None
        prefix = rel + "/"

        def inner(paths: Iterable[str]) -> list[str]:
            return [p for p in paths if p == rel or p.startswith(prefix)]

        def strip(path: str) -> str:
            return "" if path == rel else path[len(prefix) :]

        return Snapshot(
            files={strip(p): self.files[p] for p in inner(self.files)},
            links={strip(p): self.links[p] for p in inner(self.links)},
            dirs={strip(p): self.dirs[p] for p in inner(self.dirs)},
            others=frozenset(strip(p) for p in inner(self.others)),
        )

    def write(self, dest: Path, origin: Path) -> None:
        """The snapshot as files under `dest` (which must not exist): the private copy kustomize and helm
        read. A symlink is written as it was, except that an absolute one into `origin` (the directory the
        snapshot was read from) leads to the same place in the copy, so the copy reads no file of `origin`."""
        base = str(origin).rstrip(os.sep)
        for directory in sorted(self.dirs):  # parents sort before their children
            os.mkdir(dest / directory if directory else dest, 0o700)
        for path, data in self.files.items():
            with open(dest / path, "xb") as handle:
                handle.write(data)
        for path, target in self.links.items():
            if target == base or target.startswith(base + os.sep):
                target = str(dest) + target[len(base) :]
            os.symlink(target, dest / path)


def read(top: Path, *, max_bytes: int, max_files: int) -> Snapshot | None:
    """Every entry under `top`, each file read once (and only once); None past `max_bytes` of file content
    or `max_files` files, or when something cannot be read (it is then rendered from the disk, uncached)."""
    files: dict[str, bytes] = {}
    links: dict[str, str] = {}
    dirs: dict[str, tuple[str, ...]] = {}
    others: set[str] = set()
    total = 0
    try:
        for directory, subdirs, entries in os.walk(top, onerror=_raise):  # symlinked directories: not entered
            subdirs[:] = sorted(d for d in subdirs if d != ".git")
            rel = os.path.relpath(directory, top)
            rel = "" if rel == "." else Path(rel).as_posix()
            names = tuple(sorted({*entries, *subdirs}))
            dirs[rel] = names
            for name in names:
                path = os.path.join(directory, name)
                child = posixpath.join(rel, name)
                if os.path.islink(path):
                    links[child] = os.readlink(path)
                elif name not in subdirs:
                    data = _read_file(path, max_bytes - total + 1)
                    if data is None:
                        others.add(child)
                        continue
                    files[child] = data
                    total += len(data)
                    if total > max_bytes or len(files) > max_files:
                        return None
    except OSError:
        return None
    return Snapshot(files, links, dirs, frozenset(others))


def _read_file(path: str, limit: int) -> bytes | None:
    """A regular file's content (at most `limit` bytes); None for anything else. Opened without following a
    symlink (one that replaced the file since the directory was listed fails the read) and without
    blocking (a FIFO is never waited on)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb", closefd=True) as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        # read(n) allocates n bytes first: asked for the whole budget (64 MB), every file of a tree cost a
        # 64 MB allocation (the traced peak of a daemon's load). Its size (+1, to see it grew), then the rest.
        data = handle.read(min(limit, info.st_size + 1))
        if len(data) > info.st_size and len(data) < limit:
            data += handle.read(limit - len(data))
        return data


def _raise(error: OSError) -> None:
    raise error


def _b(text: str) -> bytes:
    return os.fsencode(text)
