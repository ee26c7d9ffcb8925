"""The list/watch loop's decisions on a scripted client and a fake clock: when it lists, which resourceVersion
it watches from, how long it waits, and that it stops. The real protocol (a real 410 from a compacted
version) is in tests/integration/test_listwatch_apiserver.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from gitops_sync.cluster.client import Listing
from gitops_sync.daemon.runtime.listwatch import STOP, Callbacks, ListWatch, Query, Retry
from gitops_sync.daemon.runtime.queue import Backoff
from gitops_sync.errors import ClusterError, ForbiddenError, GoneError
from tests.unit.fakes import FakeClock

PATH = "/api/v1/configmaps"


def cm(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}


def line(etype: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": etype, "object": obj}).encode()


GONE = line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"})


class Script:
    """Answers lists and watches in order; a watch script may hold lines, exceptions and time to pass.
    When every watch script is used up the loop is stopped, so `run()` returns on the test's thread."""

    def __init__(self, clock: FakeClock, lists: list[Any], watches: list[list[Any]]) -> None:
        self.clock = clock
        self.lists = lists
        self.watches = watches
        self.calls: list[tuple[str, str]] = []  # ("LIST", "") or ("WATCH", resourceVersion)
        self.loop: ListWatch | None = None

    def list_collection(
        self, path: str, *, timeout: float | None = None, api_version: str = "", kind: str = ""
    ) -> Listing:
        self.calls.append(("LIST", ""))
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    def stream_lines(self, path: str, *, query: Query | None = None, timeout: float | None = None) -> Iterator[bytes]:
        assert query is not None and query["watch"] is True and query["allowWatchBookmarks"] is True
        if not self.watches:  # the end of the script: not recorded
            assert self.loop is not None
            self.loop.stop()
            return
        self.calls.append(("WATCH", str(query["resourceVersion"])))
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            if isinstance(item, float):
                self.clock.advance(item)
                continue
            yield item


class Seen:
    def __init__(self) -> None:
        self.lists: list[tuple[list[str], str]] = []
        self.changes: list[tuple[str, str]] = []
        self.restarts: list[str] = []

    def callbacks(self, failed: Any = None) -> Callbacks:
        cb = Callbacks(
            listed=lambda items, rv: self.lists.append(([i["metadata"]["name"] for i in items], rv)),
            changed=lambda t, o: self.changes.append((t, o["metadata"]["name"])),
            restarted=self.restarts.append,
        )
        if failed is not None:
            cb.failed = failed
        return cb


def loop(script: Script, seen: Seen, clock: FakeClock, *, failed: Any = None, rv: str = "") -> ListWatch:
    lw = ListWatch(
        script,
        PATH,
        seen.callbacks(failed),
        kind="ConfigMap",
        api_version="v1",
        resource_version=rv,
        clock=clock,
        backoff=Backoff(0.5, 8.0),
    )
    script.loop = lw
    return lw


LONG = 300.0  # a watch that lasted its whole timeout


def test_lists_then_watches_from_the_list_version_and_bookmarks_advance_it() -> None:
    clock = FakeClock()
    script = Script(
        clock,
        [Listing([cm("a", 5)], "10")],
        [
            [line("MODIFIED", cm("a", 11)), line("BOOKMARK", {"metadata": {"resourceVersion": "15"}}), LONG],
            [line("BOOKMARK", {"metadata": {"resourceVersion": "20"}}), LONG],
        ],
    )
    seen = Seen()
    lw = loop(script, seen, clock)
    lw.run()
    assert script.calls == [("LIST", ""), ("WATCH", "10"), ("WATCH", "15")]
    assert seen.lists == [(["a"], "10")] and seen.changes == [("MODIFIED", "a")]
    assert seen.restarts == ["closed", "closed"], "a watch the server closed is resumed, not relisted"
    assert clock.waits == [], "a watch that lasted its timeout is resumed at once"
    assert lw.resource_version == "20"


def test_a_watch_cut_after_events_resumes_from_the_last_event_seen_without_a_list() -> None:
    clock = FakeClock()
    script = Script(
        clock,
        [Listing([], "10")],
        [[line("ADDED", cm("a", 11)), line("MODIFIED", cm("a", 12)), LONG], [line("DELETED", cm("a", 13)), LONG]],
    )
    seen = Seen()
    loop(script, seen, clock).run()
    assert script.calls == [("LIST", ""), ("WATCH", "10"), ("WATCH", "12")]
    assert seen.changes == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")], "nothing missed, nothing twice"


def test_410_gone_relists_at_once_and_watches_from_the_new_list() -> None:
    clock = FakeClock()
    script = Script(
        clock,
        [Listing([cm("a", 5), cm("b", 6)], "10"), Listing([cm("a", 25)], "30")],
        [[line("ADDED", cm("c", 12)), GONE], [LONG]],
    )
    seen = Seen()
    loop(script, seen, clock).run()
    assert script.calls == [("LIST", ""), ("WATCH", "10"), ("LIST", ""), ("WATCH", "30")]
    assert seen.lists == [(["a", "b"], "10"), (["a"], "30")]
    assert seen.restarts[0] == "gone" and clock.waits == [], "no backoff before the relist a 410 asks for"


def test_a_gone_status_at_the_start_of_the_watch_relists_too() -> None:
    clock = FakeClock()
    script = Script(clock, [Listing([], "7")], [[GoneError(410, "Expired", "too old")], [LONG]])
    seen = Seen()
    loop(script, seen, clock, rv="3").run()
    assert script.calls == [("WATCH", "3"), ("LIST", ""), ("WATCH", "7")], "resumed from 3 without a list first"
    assert seen.restarts[0] == "gone"


def test_a_broken_watch_resumes_from_the_last_version_after_a_relist_with_backoff() -> None:
    clock = FakeClock()
    script = Script(
        clock,
        [Listing([cm("a", 5)], "10"), ClusterError("unreachable"), Listing([cm("a", 5)], "40")],
        [[line("MODIFIED", cm("a", 12)), ClusterError("connection reset")], [LONG], [LONG]],
    )
    seen = Seen()
    lw = loop(script, seen, clock)
    lw.run()
    # broken watch -> relist (fails) -> backoff grows -> relist -> watch from the new list's version
    assert script.calls == [("LIST", ""), ("WATCH", "10"), ("LIST", ""), ("LIST", ""), ("WATCH", "40"), ("WATCH", "40")]
    assert clock.waits == [0.5, 1.0], "backoff doubles while failing"
    assert seen.restarts == ["error", "error", "closed", "closed"]
    assert lw.restarts == 4


def test_the_backoff_resets_after_a_good_list() -> None:
    clock = FakeClock()
    script = Script(
        clock,
        [ClusterError("x"), Listing([], "1"), ClusterError("y"), Listing([], "2")],
        [[ClusterError("broken")], [LONG]],
    )
    seen = Seen()
    loop(script, seen, clock).run()
    assert clock.waits == [0.5, 0.5, 1.0]


def test_a_watch_the_server_closes_at_once_is_followed_by_a_backoff() -> None:
    clock = FakeClock()
    script = Script(clock, [Listing([], "1")], [[], [], [LONG]])
    seen = Seen()
    loop(script, seen, clock).run()
    assert clock.waits == [0.5, 1.0], "a server closing every watch at once must not make the loop spin"


def test_failed_says_when_to_relist_or_to_stop() -> None:
    clock = FakeClock()
    asked: list[Exception] = []

    def failed(exc: Exception) -> Retry:
        asked.append(exc)
        return Retry(after=60.0) if len(asked) == 1 else STOP

    script = Script(clock, [ForbiddenError(403, "Forbidden", "no"), ForbiddenError(403, "Forbidden", "still no")], [])
    seen = Seen()
    loop(script, seen, clock, failed=failed).run()
    assert clock.waits == [60.0] and seen.restarts == ["forbidden"], "STOP ends the loop without a restart"
    assert len(asked) == 2


def test_a_bug_in_a_callback_does_not_end_the_loop() -> None:
    clock = FakeClock()
    script = Script(clock, [Listing([cm("a", 1)], "1"), Listing([cm("a", 1)], "2")], [[LONG]])
    seen = Seen()
    calls = {"n": 0}

    def listed(items: list[Any], rv: str) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("bug")
        seen.lists.append(([i["metadata"]["name"] for i in items], rv))

    lw = loop(script, seen, clock)
    lw.callbacks.listed = listed
    lw.run()
    assert seen.lists == [(["a"], "2")] and seen.restarts[0] == "error"


def test_objects_get_the_kind_they_were_watched_as() -> None:
    clock = FakeClock()
    script = Script(clock, [Listing([], "1")], [[line("ADDED", cm("a", 2)), LONG]])
    got: list[dict[str, Any]] = []
    lw = loop(script, Seen(), clock)
    lw.callbacks.changed = lambda t, o: got.append(o)
    lw.run()
    assert got[0]["kind"] == "ConfigMap" and got[0]["apiVersion"] == "v1"


class Hanging:
    """A client whose list always fails, so the loop sits in a long backoff, and whose watch never ends."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def list_collection(
        self, path: str, *, timeout: float | None = None, api_version: str = "", kind: str = ""
    ) -> Listing:
        raise ClusterError("down")

    def stream_lines(self, path: str, *, query: Query | None = None, timeout: float | None = None) -> Iterator[bytes]:
        self.release.wait(10)
        yield line("BOOKMARK", {"metadata": {"resourceVersion": "9"}})


def test_stop_ends_the_loop_waiting_in_a_backoff() -> None:
    lw = ListWatch(Hanging(), PATH, Seen().callbacks(), backoff=Backoff(3600.0, 3600.0))
    thread = threading.Thread(target=lw.run, daemon=True)
    thread.start()
    thread.join(0.2)
    assert thread.is_alive(), "waiting out an hour's backoff"
    lw.stop()
    thread.join(2)
    assert not thread.is_alive() and lw.stopped


def test_stop_ends_the_loop_at_the_next_watch_line() -> None:
    client = Hanging()
    seen = Seen()
    lw = ListWatch(client, PATH, seen.callbacks(), resource_version="5")
    thread = threading.Thread(target=lw.run, daemon=True)
    thread.start()
    thread.join(0.2)
    lw.stop()
    client.release.set()
    thread.join(2)
    assert not thread.is_alive()
    assert lw.resource_version == "5", "nothing after stop() is taken in"
    assert seen.restarts == []
