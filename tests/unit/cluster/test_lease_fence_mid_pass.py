"""A pass that began while leading writes nothing once the Lease's renew deadline passes, wherever in the pass.

The daemon's write fence is `LeaderElector.can_write`: a deadline on the elector's own clock, asked live by
each write before it is made and again at the socket (cluster/wire.py), never a verdict taken when the pass
began. Here the elector runs on a FakeClock against an in-memory Lease, and the writes go through a real
Client to a local server that records what arrived, so "not sent" is what the far end saw. The real Lease
and a frozen daemon: tests/reliability/test_leader_fence.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gitops_sync.cluster.client import Client
from gitops_sync.cluster.lease import LeaderElector
from gitops_sync.cluster.wire import WIRE_CHECK
from gitops_sync.errors import FencedError
from tests.unit.cluster.test_lease import CFG, MemoryLeases
from tests.unit.cluster.test_wire_fence import BODY, PATH, RecordingServer
from tests.unit.fakes import FakeClock, loopback_kubeconfig

_STATUS_429 = b'{"kind":"Status","code":429,"message":"too many requests, please try again later"}'
THROTTLED_3S = (
    b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 3\r\n"
    + f"Content-Length: {len(_STATUS_429)}\r\n\r\n".encode()
    + _STATUS_429
)


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    srv = RecordingServer()
    yield srv
    srv.close()


def leading(clock: FakeClock) -> tuple[MemoryLeases, LeaderElector]:
    """A replica that has just taken the Lease: its fence closes `renew_deadline` from now unless renewed."""
    store = MemoryLeases()
    elector = LeaderElector(store, "a", CFG, clock=clock, wall=clock.wall)
    assert elector.step() and elector.can_write()
    return store, elector


def write(client: Client, elector: LeaderElector, name: str) -> str:
    try:
        client.request("PATCH", f"{PATH}-{name}", body=BODY, fence=elector.can_write)
    except FencedError:
        return "fenced"
    return "sent"


def test_writes_of_a_pass_stop_at_the_renew_deadline_before_the_election_loop_notices(
    tmp_path: Path, server: RecordingServer
) -> None:
    clock = FakeClock()
    store, elector = leading(clock)
    store.down = True  # every renewal fails from now on: the API server is cut off from this replica's Lease
    outcomes = []
    with Client(loopback_kubeconfig(tmp_path, server.port), timeout=5) as client:
        for n in range(6):  # one pass, a write every 3 s: at 0, 3, 6, 9 (renew deadline 10), 12, 15
            outcomes.append(write(client, elector, str(n)))
            clock.advance(3)
    assert outcomes == ["sent"] * 4 + ["fenced"] * 2
    assert server.requests == [f"PATCH {PATH}-{n} HTTP/1.1" for n in range(4)]
    assert elector.is_leader, "closed by the deadline alone: the election loop has not stepped since"


def test_a_renewal_during_the_pass_keeps_it_writing_and_a_failed_one_does_not(
    tmp_path: Path, server: RecordingServer
) -> None:
    clock = FakeClock()
    store, elector = leading(clock)
    with Client(loopback_kubeconfig(tmp_path, server.port), timeout=5) as client:
        clock.advance(8)
        assert elector.step(), "renewed 8 s in: the fence now closes at 18 s"
        clock.advance(9)
        assert write(client, elector, "at-17s") == "sent"
        store.down = True
        clock.advance(0.5)
        assert elector.step(), "a failed renewal inside the deadline: still leading, deadline unchanged"
        clock.advance(1)
        assert write(client, elector, "at-18.5s") == "fenced"
    assert server.requests == [f"PATCH {PATH}-at-17s HTTP/1.1"]


def test_a_write_admitted_before_the_deadline_and_frozen_past_it_sends_not_one_byte(
    tmp_path: Path, server: RecordingServer
) -> None:
    """Frozen (SIGSTOP, a stalled node) between the early check and the send, for the whole renew deadline:
    another replica may hold the Lease when the process wakes, so the socket asks the elector again."""
    clock = FakeClock()
    _, elector = leading(clock)
    with Client(loopback_kubeconfig(tmp_path, server.port), timeout=5) as client:
        client.before_write = lambda method, path: clock.advance(CFG.renew_deadline)  # the freeze
        with pytest.raises(FencedError, match=WIRE_CHECK):
            client.request("PATCH", PATH, body=BODY, fence=elector.can_write)
        assert client.stats.writes == 0
    assert server.requests == []
    assert all(c.partial == b"" for c in server.connections), [c.partial for c in server.connections]


def test_a_throttled_write_whose_wait_crosses_the_deadline_is_not_sent_again(
    tmp_path: Path, server: RecordingServer
) -> None:
    """A 429 asks for 3 s more, 8 s into the lease: the retry would leave after the fence closed."""
    clock = FakeClock()
    _, elector = leading(clock)
    server.answers = [THROTTLED_3S]
    clock.advance(8)
    kubeconfig = loopback_kubeconfig(tmp_path, server.port)
    with Client(kubeconfig, timeout=30, sleep=clock.sleep) as client, pytest.raises(FencedError, match=WIRE_CHECK):
        client.request("PATCH", PATH, body=BODY, fence=elector.can_write)
    assert 3 <= clock.slept <= 4.5, "the client waited as asked, on the same clock as the fence"
    assert server.requests == [f"PATCH {PATH} HTTP/1.1"], "the retry never arrived"
