"""Whether a work tree differs from its HEAD, told without any command the repository's configuration names.

`git status` / `git diff` would run the repository's `core.fsmonitor` and, to compare a changed file, the
clean filter its `.gitattributes` names with the command its `.git/config` gives (and recurse into each
submodule doing the same with the submodule's configuration): whoever can write a local repository could
make the controller run any command. Here git only lists (safegit's environment, no command-running key
honoured): `diff-index --cached` (index against HEAD, objects only), `ls-files -s` (the index) and
`ls-files --others --exclude-standard` (untracked files, .gitignore honoured); the files themselves are
hashed here as they are on disk, which is what the render reads. A file a filter or an end-of-line rule
would make equal to its blob therefore counts as changed: the render reads the bytes, not the blob. Every
checked-out submodule is compared the same way: its HEAD against the recorded commit, then its own files.
Cost: every tracked file under the rendered path is read and hashed (no stat cache): 2,000 files ~40 ms.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

from gitops_sync.source.safegit import run_git, safe_env

_GITLINK, _SYMLINK, _EXECUTABLE = "160000", "120000", "100755"


def is_dirty(top: Path, scope: str | None, name: str, timeout: float = 60) -> bool:
    """Whether what is under `scope` (relative to the work tree `top`; None: all of it) differs from HEAD:
    staged or unstaged changes, untracked files that are not ignored, a checked-out submodule at another
    commit or with changes of its own. Raises SourceError naming `name` when git cannot tell."""
    paths = ["--", scope] if scope not in (None, "", ".") else []
    env = {**os.environ, **safe_env(), "LC_ALL": "C", "GIT_LITERAL_PATHSPECS": "1"}  # a directory named `*`
    git = ["git", "-C", str(top)]
    staged = _git([*git, "diff-index", "--cached", "--quiet", "HEAD", *paths], env, timeout, name, ok=(0, 1))
    if staged.returncode == 1:
        return True
    untracked = _git([*git, "ls-files", "--others", "--exclude-standard", "-z", *paths], env, timeout, name)
    if untracked.stdout:
        return True
    listing = _git([*git, "ls-files", "-s", "-z", "--full-name", *paths], env, timeout, name).stdout
    return any(record and _changed(top, record, env, timeout, name) for record in listing.split(b"\0"))


def _changed(top: Path, record: bytes, env: dict[str, str], timeout: float, name: str) -> bool:
    """Whether the work tree's file of one `ls-files -s -z` record differs from the index (hence HEAD)."""
    meta, _, raw = record.partition(b"\t")
    mode, sha, stage = meta.decode().split(" ")
    parts = raw.split(b"/")
    if stage != "0" or any(part in (b"", b".", b"..") for part in parts):
        return True  # a conflict, or a path no checkout writes
    path = os.path.join(os.fsencode(top), raw)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return mode != _GITLINK  # a submodule never checked out is a hole, not a change
    except NotADirectoryError:
        return True
    if mode == _GITLINK:
        return _submodule_changed(Path(os.fsdecode(path)), sha, env, timeout, name)
    if mode == _SYMLINK:
        return not stat.S_ISLNK(info.st_mode) or _blob_id(os.readlink(path), sha) != sha
    if not stat.S_ISREG(info.st_mode) or (mode == _EXECUTABLE) != bool(info.st_mode & stat.S_IXUSR):
        return True
    return _file_id(path, info.st_size, sha) != sha


def _submodule_changed(directory: Path, sha: str, env: dict[str, str], timeout: float, name: str) -> bool:
    if not os.path.lexists(directory / ".git"):
        return False  # not checked out: a hole (submodules.py), as `git status` shows nothing for it
    head = _git(["git", "-C", str(directory), "rev-parse", "--verify", "HEAD"], env, timeout, name, ok=(0, 128))
    if head.returncode != 0 or head.stdout.decode().strip() != sha:
        return True
    return is_dirty(directory, None, name, timeout)


def _hasher(sha: str) -> hashlib._Hash:
    return hashlib.sha256() if len(sha) == 64 else hashlib.sha1(usedforsecurity=False)


def _blob_id(content: bytes, sha: str) -> str:
    digest = _hasher(sha)
    digest.update(b"blob %d\0" % len(content))
    digest.update(content)
    return digest.hexdigest()


def _file_id(path: bytes, size: int, sha: str) -> str:
    digest = _hasher(sha)
    digest.update(b"blob %d\0" % size)
    read = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                read += len(chunk)
    except OSError:
        return ""
    return digest.hexdigest() if read == size else ""


def _git(
    argv: list[str], env: dict[str, str], timeout: float, name: str, ok: tuple[int, ...] = (0,)
) -> subprocess.CompletedProcess[bytes]:
    return run_git(argv, env, timeout, prefix=f"{name}: cannot read the Git status: ", ok=ok)
