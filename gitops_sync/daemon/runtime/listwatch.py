"""The one list-then-watch loop behind every watch of the daemon (the object cache, the GitSyncs).

It lists a collection and remembers the list's resourceVersion, then watches from it with bookmarks,
remembering the last resourceVersion it saw. A watch the server ends (its timeout) is resumed from there,
so nothing between two watches is missed and nothing is listed twice. A 410 Gone (that version was
compacted away) leads to a fresh list at once; a broken connection or another error to a fresh list after
a backoff. The kubernetes client's own watch cannot resume, hence this loop.

What was seen goes to a `Callbacks` (the whole list, then one change at a time): the watch cache keeps
objects, the fleet controller its GitSyncs. The loop runs on the caller's thread until `stop()`. The
client and the clock are injected, so its decisions are tested on fakes without sleeping.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from gitops_sync import jsoncodec
from gitops_sync.cluster.client import Listing
from gitops_sync.daemon.runtime.queue import Backoff
from gitops_sync.errors import ClusterError, ForbiddenError, GoneError, error_for_status
from gitops_sync.log import get_logger
from gitops_sync.resource import Manifest, resource_version

log = get_logger(__name__)

Query = dict[str, str | int | bool | None]

# A watch the server closes sooner than this after it began is followed by a backoff, so a server that
# closes every watch at once does not make the loop spin.
_SHORT_WATCH = 1.0


class ListWatchClient(Protocol):
    """The two API calls the loop makes (`cluster.client.Client` has both)."""

    def list_collection(
        self, path: str, *, timeout: float | None = None, api_version: str = "", kind: str = ""
    ) -> Listing: ...

    def stream_lines(
        self, path: str, *, query: Query | None = None, timeout: float | None = None
    ) -> Iterator[bytes]: ...


class Clock:
    """Time as the loop sees it: calling it reads the monotonic clock (how long a watch lasted, as every
    `Callable[[], float]` clock of the package does), `wait` for a backoff that `stop` ends."""

    def __call__(self) -> float:
        return time.monotonic()

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Wait `seconds` or until `stop` is set; True when stopped."""
        return stop.wait(seconds)


@dataclass(frozen=True)
class Retry:
    """What to do after a failed list or watch: relist after `after` seconds (None: the loop's backoff),
    or end the loop (`stop`), e.g. when a narrower watch replaces this one."""

    after: float | None = None
    stop: bool = False


BACKOFF = Retry()
STOP = Retry(stop=True)


def _backoff_on_error(exc: Exception) -> Retry:
    return BACKOFF


def _ignore_restart(reason: str) -> None:
    return None


@dataclass
class Callbacks:
    """Where the loop's findings go. Called on the loop's thread, so each must return quickly.

    `listed(items, resourceVersion)`: a complete list (the first, or after a 410 or an error), to replace
    what was known. `changed(type, object)`: ADDED, MODIFIED or DELETED from the watch. `restarted(reason)`:
    the watch began again ("closed" by the server, "gone", "error", "forbidden"). `failed(exc)`: a list or
    watch failed; says when to relist (after `restarted` is NOT called when it answers STOP).
    """

    listed: Callable[[list[Manifest], str], None]
    changed: Callable[[str, Manifest], None]
    restarted: Callable[[str], None] = field(default=_ignore_restart)
    failed: Callable[[Exception], Retry] = field(default=_backoff_on_error)


class ListWatch:
    """List, then watch from the list's resourceVersion; relist on 410 Gone or a broken watch; stoppable.

    `resource_version` given: watch from it without a first list (a loop resumed where it was). `watch_client`
    serves the long-lived watch streams when they must not share the listing client's connection pool.
    """

    def __init__(
        self,
        client: ListWatchClient,
        path: str,
        callbacks: Callbacks,
        *,
        name: str = "",
        api_version: str = "",
        kind: str = "",
        watch_client: ListWatchClient | None = None,
        resource_version: str = "",
        clock: Clock | None = None,
        backoff: Backoff | None = None,
        watch_timeout: tuple[int, int] = (240, 360),
        list_timeout: float = 60.0,
        rand: random.Random | None = None,
    ) -> None:
        self.client = client
        self.watch_client = watch_client or client
        self.path = path
        self.callbacks = callbacks
        self.name = name or path
        self.api_version = api_version
        self.kind = kind
        self.resource_version = resource_version
        self._resume = bool(resource_version)  # the first run watches from it; later runs list first
        self.restarts = 0
        self.clock = clock or Clock()
        self.backoff = backoff or Backoff(0.5, 8.0, jitter=0.2)
        self.watch_timeout = watch_timeout
        self.list_timeout = list_timeout
        self._rand = rand or random.Random()
        self._stop = threading.Event()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """End the loop: at once when it waits for a backoff, at the next event or watch timeout otherwise."""
        self._stop.set()

    def run(self) -> None:
        """Loop until `stop()`. Safe to call again after it returned (a revived loop lists first)."""
        need_list, self._resume = not self._resume, False
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                    self.backoff.reset()
                    if self._stop.is_set():
                        break
                started = self.clock()
                self._watch()
                if self._stop.is_set():
                    break
                self._restarted("closed")  # the server ended the watch (its timeout): resume from the version
                if self.clock() - started < _SHORT_WATCH:
                    self.clock.wait(self._stop, self.backoff.next())
            except GoneError:  # the version we resume from is too old: only a new list helps
                log.info("watch expired; relisting", resource=self.name)
                self._restarted("gone")
                need_list = True
            except Exception as exc:  # an API error, or a bug: never silently end the loop, relist
                if not isinstance(exc, ClusterError):
                    log.exception("watch loop failed", resource=self.name)
                retry = self.callbacks.failed(exc)
                if retry.stop:
                    return
                self._restarted("forbidden" if isinstance(exc, ForbiddenError) else "error")
                need_list = True
                self.clock.wait(self._stop, self.backoff.next() if retry.after is None else retry.after)

    def _restarted(self, reason: str) -> None:
        self.restarts += 1
        self.callbacks.restarted(reason)

    def _list(self) -> None:
        listing = self.client.list_collection(
            self.path, timeout=self.list_timeout, api_version=self.api_version, kind=self.kind
        )
        if self._stop.is_set():
            return
        self.callbacks.listed(listing.items, listing.resource_version)
        self.resource_version = listing.resource_version

    def _watch(self) -> None:
        timeout = self._rand.randint(*self.watch_timeout)
        query: Query = {
            "watch": True,
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": timeout,
        }
        for line in self.watch_client.stream_lines(self.path, query=query, timeout=timeout + 30):
            if self._stop.is_set():
                return
            # orjson: faster, and its key cache shares the field names of every event's object (the watch
            # cache keeps thousands of them: ~16 kB instead of ~22 kB per cached Deployment)
            self._event(jsoncodec.loads(line))

    def _event(self, event: dict[str, Any]) -> None:
        etype = str(event.get("type", ""))
        obj = event.get("object") or {}
        if etype == "ERROR":  # a Status: 410 Gone when our resourceVersion was compacted away
            raise error_for_status(
                int(obj.get("code") or 500),
                str(obj.get("reason") or "Error"),
                str(obj.get("message") or obj),
                obj,
                method="WATCH",
                path=self.path,
            )
        rv = resource_version(obj)
        if etype in ("ADDED", "MODIFIED", "DELETED"):
            if self.api_version:
                obj.setdefault("apiVersion", self.api_version)
            if self.kind:
                obj.setdefault("kind", self.kind)
            self.callbacks.changed(etype, obj)
        self.resource_version = rv or self.resource_version  # a BOOKMARK only moves the version on
