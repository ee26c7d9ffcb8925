"""Write the files of a commit from its blobs, as stored: no filter, no end-of-line or encoding conversion.

`git checkout-index` would run the smudge filter a repository's `.gitattributes` names with the command its
`.git/config` gives (and convert line endings and encodings as they say): whoever can write a local
repository could make the controller run any command. Here `git ls-tree -r -z` lists the commit and one
`git cat-file --batch` streams every blob, both with safegit's environment; neither applies attributes.
What lands on disk is what `checkout-index` writes without attributes: regular files (0666, or 0777 for
mode 100755, less the umask), symlinks holding their target (the render follows those that stay inside the
repository) and an empty directory for each submodule (never fetched: a hole, submodules.py).
A path git itself refuses to check out (`.`, `..`, `.git`, an entry below a symlink or a file, the same path
twice) makes the whole commit refused: a crafted tree must not write outside `staging`.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from subprocess import PIPE
from typing import IO

from gitops_sync.errors import SourceError
from gitops_sync.source.safegit import failure, run_git, safe_env

_GITLINK, _SYMLINK, _EXECUTABLE = b"160000", b"120000", b"100755"
_REFUSED = (b"", b".", b"..", b".git")
_CHUNK = 1 << 20


def write_commit(git_dir: Path, sha: str, staging: Path, timeout: float) -> None:
    """The files of commit `sha` of the repository at `git_dir` into the (empty) directory `staging`.
    Raises SourceError (the caller names the repository) when git fails or a path is refused."""
    env = {**os.environ, **safe_env(), "LC_ALL": "C"}
    git = ["git", f"--git-dir={git_dir}"]
    listing = run_git([*git, "ls-tree", "-r", "-z", "--full-tree", sha], env, timeout).stdout
    files: list[tuple[bytes, bytes, bytes]] = []
    made = _Dirs(os.fsencode(staging))
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _, rest = meta.partition(b" ")
        blob = rest.partition(b" ")[2]
        if mode == _GITLINK:
            made.make(path, final=True)
        else:
            files.append((mode, blob, path))
    if files:
        _write_blobs(git, env, timeout, files, made)


class _Dirs:
    """The directories written so far under `top`: an entry's parents are made here, never followed."""

    def __init__(self, top: bytes) -> None:
        self.top = top
        self.known: set[bytes] = {b""}

    def make(self, path: bytes, *, final: bool = False) -> bytes:
        """`top/path` to write (its parents made); with `final`, `path` itself as a directory."""
        parts = path.split(b"/")
        if any(part in _REFUSED or part.lower() == b".git" for part in parts):
            raise SourceError(f"the commit holds a path git refuses to check out: {path.decode(errors='replace')!r}")
        upto = len(parts) if final else len(parts) - 1
        for i in range(1, upto + 1):
            prefix = b"/".join(parts[:i])
            if prefix not in self.known:
                try:
                    os.mkdir(os.path.join(self.top, prefix))
                except FileExistsError:  # a file or symlink of the same name came first
                    raise SourceError(f"the commit holds {path.decode(errors='replace')!r} twice") from None
                self.known.add(prefix)
        return os.path.join(self.top, path)


def _write_blobs(
    git: list[str], env: dict[str, str], timeout: float, files: list[tuple[bytes, bytes, bytes]], made: _Dirs
) -> None:
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: git never blocks on what it says
        proc = subprocess.Popen([*git, "cat-file", "--batch"], env=env, stdin=PIPE, stdout=PIPE, stderr=errors)
        assert proc.stdin is not None and proc.stdout is not None
        feeder = threading.Thread(target=_feed, args=(proc.stdin, (blob for _, blob, _ in files)), daemon=True)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            proc.kill()

        watchdog = threading.Timer(timeout, expire)
        feeder.start()
        watchdog.start()
        try:
            for mode, blob, path in files:
                header = proc.stdout.readline().split()
                if len(header) != 3 or header[0] != blob or header[1] != b"blob":
                    shown = path.decode(errors="replace")
                    raise SourceError(f"cannot read blob {blob.decode(errors='replace')} of {shown}")
                _write_one(proc.stdout, int(header[2]), mode, made.make(path))
                proc.stdout.read(1)  # the newline after each object
        except BaseException as err:
            proc.kill()  # whatever stopped us (a refused path, a full disk): the feeder must not wait on git
            if expired.is_set() and isinstance(err, SourceError):
                raise SourceError(f"git cat-file timed out after {timeout:g}s") from None
            raise
        finally:
            watchdog.cancel()
            feeder.join()
            proc.stdout.close()
            proc.wait()
        errors.seek(0)
        stderr = errors.read()
    if proc.returncode != 0:
        raise SourceError(failure(stderr, timeout, proc.returncode))


def _write_one(stream: IO[bytes], size: int, mode: bytes, target: bytes) -> None:
    if mode == _SYMLINK:
        try:
            os.symlink(stream.read(size), target)
        except FileExistsError:
            raise SourceError(f"the commit holds {os.fsdecode(target)!r} twice") from None
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, flags, 0o777 if mode == _EXECUTABLE else 0o666)
    except FileExistsError:
        raise SourceError(f"the commit holds {os.fsdecode(target)!r} twice") from None
    try:
        while size > 0:
            chunk = stream.read(min(size, _CHUNK))
            if not chunk:
                raise SourceError("git cat-file stopped before the end of a blob")
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
            size -= len(chunk)
    finally:
        os.close(fd)


def _feed(stdin: IO[bytes], blobs: Iterator[bytes]) -> None:
    try:
        for blob in blobs:
            stdin.write(blob + b"\n")
        stdin.close()
    except (BrokenPipeError, ValueError, OSError):
        pass  # git was killed or failed: the reader reports it
