"""Which Git submodules a checkout lacks the files of, so the render refuses to read them.

Submodules are never fetched: in a materialised commit every gitlink is an empty directory; in a work tree
one not checked out (`git submodule update --init` never run, or `deinit`) is. The paths found here become
`Checkout.holes`, which the render reads as RenderOptions.holes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from gitops_sync.source.remote import mask_url
from gitops_sync.source.safegit import run_git

if TYPE_CHECKING:
    import git

# A submodule's record in `git ls-tree -r -z` / `git ls-files -s -z` output starts with its mode: a commit of
# another repository. Then `<type> <sha>` or `<sha> <stage>`, a tab and the path.
_GITLINK = "\x00160000 "


def gitlinks(listing: str, under: str = "") -> tuple[str, ...]:
    """The submodule paths in NUL-separated `git ls-tree -r -z` / `git ls-files -s -z` output, those under
    `under` only and relative to it (posix). str.find, not a per-record split: 20,000 files take ~1 ms."""
    prefix = f"{under}/" if under else ""
    text = "\0" + listing
    found = []
    start = text.find(_GITLINK)
    while start != -1:
        tab = text.find("\t", start)
        end = text.find("\0", tab)
        path = text[tab + 1 : end if end != -1 else len(text)]
        if tab != -1 and path.startswith(prefix):
            found.append(path[len(prefix) :])
        start = text.find(_GITLINK, start + 1) if end != -1 else -1
    return tuple(sorted(found))


def commit_gitlinks(repo: git.Repo, sha: str, under: str, name: str, timeout: float) -> tuple[str, ...]:
    """Every submodule of commit `sha` under `under`: none of them has its files in the materialised tree."""
    argv = ["git", f"--git-dir={repo.git_dir}", "ls-tree", "-r", "-z", "--full-tree", sha]
    done = run_git(argv, _env(repo), timeout, prefix=f"{mask_url(name)}: cannot list the files of {sha}: ")
    return gitlinks(done.stdout.decode(errors="surrogateescape"), under)


def work_tree_submodules(
    local: git.Repo, given: Path, name: str, timeout: float = 60
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The submodules of the work tree under `given` (those of checked-out submodules too, read from their own
    index), and those of them not checked out (their directory holds no `.git`: `git submodule update --init`
    was never run, or `deinit` was), relative to `given`."""
    top = Path(local.working_tree_dir or ".").resolve()
    inside = given.relative_to(top).as_posix() if given.is_relative_to(top) else ""
    pending = list(gitlinks(_index(local, top, name, timeout), "" if inside == "." else inside))
    found: list[str] = []
    holes: list[str] = []
    while pending:
        path = pending.pop()
        found.append(path)
        if not os.path.lexists(given / path / ".git"):
            holes.append(path)
            continue
        pending += [f"{path}/{inner}" for inner in gitlinks(_index(local, given / path, name, timeout))]
    return tuple(sorted(found)), tuple(sorted(holes))


def _index(local: git.Repo, directory: Path, name: str, timeout: float) -> str:
    """`git ls-files -s -z` of the repository whose work tree `directory` is the top of."""
    argv = ["git", "-C", str(directory), "ls-files", "-s", "-z", "--full-name"]
    done = run_git(argv, _env(local), timeout, prefix=f"{name}: cannot read the Git index of {directory}: ")
    return done.stdout.decode(errors="surrogateescape")


def _env(repo: git.Repo) -> dict[str, str]:
    """The environment GitPython gives `repo`'s gits (safegit's for a local repository), over ours."""
    return {**os.environ, **repo.git.environment(), "LC_ALL": "C"}
