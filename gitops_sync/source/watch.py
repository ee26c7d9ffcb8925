"""Watch a local directory and call back once per burst of changes.

An editor save or a `git commit` produces dozens of file-system events; the callback (a re-render and
a sync) should run once after things settle, hence the debounce. Inside `.git/` only HEAD and refs
matter: they change on commit, checkout and reset, while objects/, logs/ and index churn constantly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import git
from git.exc import InvalidGitRepositoryError, NoSuchPathError
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from gitops_sync.log import get_logger

_log = get_logger(__name__)
_GIT_TRIGGERS = ("HEAD", "packed-refs", "ORIG_HEAD")


class Watch:
    """A running watch; `stop()` ends it (also usable as a context manager)."""

    def __init__(self, root: Path, on_change: Callable[[], None], debounce: float) -> None:
        self._root = root.resolve()
        self._on_change = on_change
        self._debounce = debounce
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._stopped = False
        self._git_dirs = _git_dirs(self._root)
        self._observer: BaseObserver = Observer()
        handler = _Handler(self)
        self._observer.schedule(handler, str(self._root), recursive=True)
        for git_dir in self._git_dirs:
            if not git_dir.is_relative_to(self._root):
                self._observer.schedule(handler, str(git_dir), recursive=True)
        self._observer.daemon = True
        self._observer.start()

    def relevant(self, raw_path: str) -> bool:
        """Whether a changed path can change what is rendered or which commit it is."""
        path = Path(raw_path)
        for git_dir in self._git_dirs:
            if path == git_dir or path.is_relative_to(git_dir):
                rel = path.relative_to(git_dir)
                return not rel.name.endswith(".lock") and (
                    str(rel) in _GIT_TRIGGERS or (rel.parts[:1] == ("refs",) and len(rel.parts) > 1)
                )
        if not path.is_relative_to(self._root):
            return False
        # Hidden files and editor backups are never rendered: a swap file must not trigger a sync.
        parts = path.relative_to(self._root).parts
        return not any(part.startswith(".") or part.endswith("~") for part in parts)

    def poke(self) -> None:
        """(Re)start the quiet-period timer: the callback runs `debounce` seconds after the last event."""
        with self._lock:
            if self._stopped:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self._debounce, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._timer = None
        try:
            self._on_change()
        except Exception:  # the watch must survive a failing sync; the callback reports its own errors
            _log.exception("watch callback failed", root=str(self._root))

    def alive(self) -> bool:
        """Whether the observer thread still runs (a daemon supervises it)."""
        return self._observer.is_alive()

    def stop(self) -> None:
        """Stop watching; a pending debounced callback is dropped."""
        with self._lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        self._observer.stop()
        if self._observer.is_alive():
            self._observer.join(timeout=5)

    def __enter__(self) -> Watch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _Handler(FileSystemEventHandler):
    def __init__(self, watch: Watch) -> None:
        self._watch = watch

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        if event.is_directory and event.event_type == "modified":
            return  # the parent of a changed entry; the entry's own event decides
        paths = [event.src_path, getattr(event, "dest_path", "")]
        if any(p and self._watch.relevant(_text(p)) for p in paths):
            self._watch.poke()


def watch(root: Path, on_change: Callable[[], None], debounce: float = 0.3) -> Watch:
    """Call `on_change()` once after each burst of relevant changes under `root` (and its Git HEAD/refs)."""
    return Watch(root, on_change, debounce)


def _git_dirs(root: Path) -> list[Path]:
    """The git dir (HEAD) and common dir (refs) of the repository holding `root`, if any."""
    try:
        repo = git.Repo(root, search_parent_directories=True)
    except (InvalidGitRepositoryError, NoSuchPathError):
        return []
    with repo:
        dirs = {Path(repo.git_dir).resolve(), Path(repo.common_dir).resolve()}
    return sorted(dirs)


def _text(path: str | bytes) -> str:
    return path.decode(errors="replace") if isinstance(path, bytes) else path
