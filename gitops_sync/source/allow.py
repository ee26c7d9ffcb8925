"""Which local paths a fleet source may read: those under an allow-list, and never the clone cache.

The repository of `sync`, `diff`, `render` and `run --repo` is the operator's own choice and is not
checked here: whoever runs the CLI owns its file system. A GitSync's `spec.repository` is written by
whoever may create GitSyncs (a tenant): a local path there reads the controller's file system, and the
clone cache keeps every source's repositories at predictable paths (`<cache>/<sha256(url)[:24]>/repo.git`,
`.../trees/<sha>`), so a tenant naming another's clone would have its manifests applied into its own
namespace. `LocalRepositories.check` refuses, before anything reads the path:

- a local path or `file://` URL that is not under a `--allow-local-repository` directory (none by default);
- one that overlaps the clone cache, either way (inside it, or holding it: a render walks the whole tree,
  and kustomize bases and symlinks may lead anywhere inside the repository), even under an allowed parent;
- a repository whose Git directory, common directory or object alternates lie in the clone cache (a
  bare repository or a `.git` file inside an allowed directory would otherwise read a clone's objects).

Paths are compared after `~`, `..` and every symlink are resolved, as the kernel will when git opens them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from gitops_sync.errors import RepositoryNotAllowed
from gitops_sync.source.gitdir import is_bare
from gitops_sync.source.remote import is_remote, mask_url

FLAG = "--allow-local-repository"
_MAX_ALTERNATES = 5  # git follows alternates this deep


def local_path_of(repo: str) -> str | None:
    """The path a local path or `file://` URL names as git reads it; None for a remote URL.

    git drops a `file://` URL's authority (`file://host/srv/x` is `/srv/x`), percent-decodes the rest and
    keeps `?` and `#` as part of the path, so this does the same (not `urlsplit`, which would cut them)."""
    if repo.startswith("oci://"):
        return None  # an OCI artifact: held to the operator's --allow-chart-repository when fetched
    if repo[:7].lower() == "file://":
        rest = repo[7:]
        slash = rest.find("/")
        return unquote(rest[slash:]) if slash >= 0 else ""
    return None if is_remote(repo) else repo


def real_path(path: str | Path) -> Path:
    """`path` with `~`, `..` and symlinks resolved (strictly when it exists; as far as it does otherwise)."""
    expanded = os.path.expanduser(os.fspath(path)) or "."
    try:
        return Path(os.path.realpath(expanded, strict=True))
    except OSError:  # missing (fetch reports it), a symlink loop, unreadable: resolve what can be
        return Path(os.path.realpath(expanded))


def _overlaps(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


@dataclass(frozen=True)
class LocalRepositories:
    """The fleet's rule for local repositories: `allowed` directories, the clone `cache` never (all real)."""

    allowed: tuple[Path, ...]
    cache: Path

    @classmethod
    def of(cls, allowed: Iterable[Path | str], cache: Path) -> LocalRepositories:
        """Checked at start-up: every allowed directory exists and is not inside the clone cache (a parent of
        the cache may be allowed; the cache below it stays refused)."""
        real_cache = real_path(cache)
        dirs: list[Path] = []
        for given in allowed:
            real = real_path(given)
            if not real.is_dir():
                raise ValueError(f"{FLAG} {given}: no such directory")
            if real == real_cache or real.is_relative_to(real_cache):
                raise ValueError(f"{FLAG} {given}: is inside the clone cache {real_cache} (never allowed)")
            if real not in dirs:
                dirs.append(real)
        return cls(tuple(dirs), real_cache)

    def check(self, repo: str) -> Path | None:
        """None for a remote URL; the real directory of an allowed local path or `file://` URL; else raises
        RepositoryNotAllowed naming the repository (masked) and why."""
        local = local_path_of(repo)
        if local is None:
            return None
        real = real_path(local)
        shown = mask_url(repo)
        where = shown if str(real) == local else f"{shown} (resolved: {real})"
        if _overlaps(real, self.cache):
            raise RepositoryNotAllowed(
                f"repository {where} is not allowed: it overlaps the controller's clone cache {self.cache}, "
                "which holds the clones of every source"
            )
        if not any(real.is_relative_to(a) for a in self.allowed):
            dirs = ", ".join(map(str, self.allowed)) or "none"
            raise RepositoryNotAllowed(
                f"repository {where} is not allowed: a GitSync may name a local path or file:// URL only "
                f"under a directory the controller allows with {FLAG} (allowed: {dirs})"
            )
        self.check_git_dirs(real, shown)
        return real

    def check_git_dirs(self, directory: Path, shown: str) -> None:
        """The repository git would open for `directory` (it, or the first parent holding `.git` or a bare
        layout) must keep its Git directory, common directory and object alternates out of the clone cache."""
        for git_dir in _git_dirs(directory):
            if _overlaps(git_dir, self.cache):
                raise RepositoryNotAllowed(
                    f"repository {shown} is not allowed: its Git data ({git_dir}) is in the controller's "
                    f"clone cache {self.cache}, which holds the clones of every source"
                )


def _git_dirs(directory: Path) -> list[Path]:
    """The real Git directory git finds from `directory`, its common directory and its alternates' object
    directories (followed as deep as git does); [] outside any repository."""
    top = next((d for d in (directory, *directory.parents) if (d / ".git").exists() or is_bare(d)), None)
    if top is None:
        return []
    git_dir = top if is_bare(top) and not (top / ".git").exists() else top / ".git"
    if git_dir.is_file():  # a `gitdir: <path>` file (a worktree, a submodule, `git init --separate-git-dir`)
        text = _read(git_dir).strip()
        target = text.removeprefix("gitdir:").strip() if text.startswith("gitdir:") else ""
        git_dir = git_dir.parent / target if target else git_dir
    found = [real_path(git_dir)]
    common = _read(found[0] / "commondir").strip()
    if common:
        found.append(real_path(found[0] / common))
    objects = [found[-1] / "objects"]
    for _ in range(_MAX_ALTERNATES):
        more = []
        for obj in objects:
            for line in _read(obj / "info" / "alternates").splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    more.append(real_path(obj / line))
        found.extend(more)
        objects = more
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


__all__ = ["FLAG", "LocalRepositories", "local_path_of", "real_path"]
