"""A leader frozen after its write fence admitted a write must send nothing once its Lease expired.

Two daemon replicas of one source (300 ConfigMaps, lease 4 s / renew deadline 3 s) on a private control
plane. Replica a (tests/reliability/frozen_replica.py: `gitops-sync run` with fault seams) leads, applies
v1, and is frozen with SIGSTOP while it applies the commit v2 (updates: a create would be refused by its
own precondition once b created the object): either by itself, right after its early fence check
admitted the v2 write of one object and before the request is made (the interleaving made certain), or
from outside at some moment of the apply (as the issue reproduced it). While a is frozen, Git moves to
v3, replica b takes the Lease and applies v3; then a gets SIGCONT. A late write of a would put v2 back
over v3. The API server's audit log says which of a's writes took effect after a's Lease expired (its
last renewal as the server received it, plus the lease duration).

Each kind of round runs twice: with the check at the socket (cluster/wire.py) and with it switched off,
the early check alone as before that check existed. The second arm must show the late write (else the
fault did not happen and the first arm's zero proves nothing); the first must show none.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon_support import Daemon, GitRepo, wait_until
from tests.reliability.conftest import Recorder
from tests.reliability.faults import PrivateCluster
from tests.reliability.workload import audit_events, configmap_files, count_configmaps, kubectl, size

pytestmark = pytest.mark.cluster

OBJECTS = 300
LEASE = 4.0
FAST = ["--lease-duration", str(int(LEASE)), "--renew-deadline", "3", "--retry-period", "0.5"]
WRAPPER = "tests.reliability.frozen_replica"
AGENT = " frozen-replica"
# Rounds per arm, cut to what still shows the fault in CI (the whole suite must stay near 20 min; a round
# is about 25 s): the hook round makes the late write certain in the unfenced arm (asserted below), the
# SIGSTOP round freezes at a moment of the apply from outside. Earlier runs of 3 + 4 rounds per arm (and
# the 29 rounds docs/safety.md quotes) took 5-6 min; raise these to measure the window again.
HOOK_ROUNDS = 1
SIGSTOP_ROUNDS = 1


@pytest.fixture(scope="module")
def cluster(private_cluster: PrivateCluster) -> PrivateCluster:
    return private_cluster


@dataclass
class Round:
    how: str  # "hook" (frozen by itself after its check) or "sigstop" (from outside, mid-apply)
    wire: bool  # the check at the socket on
    effect: list[str]  # a's writes that succeeded and completed after a's Lease expired
    started: list[str]  # a's write requests the API server received after a's Lease expired (any outcome)
    hooked: str  # the object whose write a was frozen after admitting ("" for a SIGSTOP from outside)
    frozen_for: float
    took_over_after: float  # b's first Lease write, seconds after a's Lease expired
    refused_at_socket: int
    window: list[int]  # ns from the last fence check to SSLSocket.send, per block (b's, and a's before the freeze)
    sends: list[int]  # ns each of those sends took
    exposure: float  # b (never frozen): share of its busy time some block was between its check and its send


def _stamp(ev: dict[str, Any], field: str = "requestReceivedTimestamp") -> float:
    return datetime.fromisoformat(str(ev[field])).timestamp()


def _writes(audit: Path, offset: int, ns: str) -> list[dict[str, Any]]:
    """Completed, not dry-run writes in `ns` after `offset` bytes of the audit log."""
    return audit_events(audit, ns, offset, ("create", "update", "patch", "delete"))


def _ok(ev: dict[str, Any]) -> bool:
    return int((ev.get("responseStatus") or {}).get("code") or 0) < 300


def _from_a(ev: dict[str, Any]) -> bool:
    return str(ev.get("userAgent", "")).endswith(AGENT)


def _stopped(d: Daemon) -> bool:
    """The process is in state T (stopped by a signal)."""
    stat = Path(f"/proc/{d.proc.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _holder(env: dict[str, str], ns: str) -> str:
    items = json.loads(kubectl(env, "get", "leases", "-n", ns, "-o", "json").stdout)["items"]
    return str(items[0]["spec"].get("holderIdentity") or "") if items else ""


def _window(d: Daemon) -> tuple[list[int], list[int], float]:
    """Per block a fenced write sent: ns from its last check to SSLSocket.send, ns the send took; and the
    share of the busy time (sends less than 0.1 s apart) during which some block was between the two."""
    lines = d.logged("frozen-replica: window")
    if not lines:  # no check at the socket to time (the code before it): the test fails on the figures' count
        return [], [], 0.0
    blocks = sorted(tuple(b) for b in lines[-1]["blocks"])
    busy = sum(min(b[0] - a[0], 100_000_000) for a, b in itertools.pairwise(blocks))
    gaps = [b[1] for b in blocks]
    return gaps, [b[2] for b in blocks], sum(gaps) / busy if busy else 0.0


def _round(cluster: PrivateCluster, tmp_path: Path, n: int, *, how: str, wire: bool) -> Round:
    env = cluster.env
    audit = cluster.state_dir / "logs" / "audit.log"
    ns = f"fence-{how}-{'wire' if wire else 'early'}-{n}"
    kubectl(env, "create", "namespace", ns)
    repo = GitRepo(tmp_path / ns, configmap_files(OBJECTS, "v1"))
    args = ["--repo", str(repo.path), "-n", ns, "--leader-elect", *FAST]
    env_b = {**env, "FROZEN_REPLICA_MEASURE": "1"}
    env_a = {**env_b, "FROZEN_REPLICA_AGENT": AGENT}
    hooked = ""
    extra: list[str] = []
    if how == "hook":  # one apply worker: the write it was frozen after is the only one a has in flight
        hooked = f"cm-{40 + 100 * n % 300:03d}"
        env_a["FROZEN_REPLICA_STOP_AT"] = f"{hooked}:2"  # its second write: the update to v2
        extra = ["--concurrency", "1"]
    if not wire:
        env_a["FROZEN_REPLICA_NO_WIRE_FENCE"] = "1"
        env_b.pop("FROZEN_REPLICA_MEASURE")
    offset = size(audit)
    a = Daemon([*args, *extra, "--leader-elect-identity", f"{ns}-a"], env_a, tmp_path / f"{ns}-a.log", module=WRAPPER)
    b: Daemon | None = None
    try:
        a.wait_ready(120)
        wait_until("a to apply v1", lambda: count_configmaps(env, ns, "v1") == OBJECTS, 120, 0.2)
        v2 = size(audit)
        repo.commit(configmap_files(OBJECTS, "v2"), "v2")
        if how == "hook":
            wait_until(f"a to freeze itself after admitting the v2 write of {hooked}", lambda: _stopped(a), 120, 0.02)
        else:
            at = 40 + 50 * n % 250
            wait_until(
                f"a to have written {at} v2 updates",
                lambda: (
                    sum(1 for e in _writes(audit, v2, ns) if _from_a(e) and e["objectRef"]["resource"] == "configmaps")
                    >= at
                ),
                120,
                0.005,
            )
            os.kill(a.proc.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        assert _holder(env, ns) == f"{ns}-a"
        repo.commit(configmap_files(OBJECTS, "v3"), "v3")
        b = Daemon([*args, "--leader-elect-identity", f"{ns}-b"], env_b, tmp_path / f"{ns}-b.log", module=WRAPPER)
        wait_until("b to take the Lease over", lambda: _holder(env, ns) == f"{ns}-b", 60, 0.1)
        wait_until("b to apply v3", lambda: count_configmaps(env, ns, "v3") == OBJECTS, 120, 0.2)
        os.kill(a.proc.pid, signal.SIGCONT)
        frozen_for = time.monotonic() - frozen
        wait_until(
            "a, thawed, to end the pass it was frozen in",
            lambda: a.logged("pass abandoned: this replica may no longer write") or a.logged("pass failed"),
            60,
            0.1,
        )
        wait_until("a to step down", lambda: not a.status()["daemon"]["leader"], 30, 0.1)
        assert a.stop() == 0 and b.stop() == 0
    finally:
        for d in (a, b):
            if d is not None and d.proc.poll() is None:
                os.kill(d.proc.pid, signal.SIGCONT)
                d.stop()
    time.sleep(1)  # both stopped; a request they gave up on may still complete on the server: let it be logged
    events = _writes(audit, offset, ns)
    renewals = [_stamp(e) for e in events if _from_a(e) and e["objectRef"]["resource"] == "leases" and _ok(e)]
    expiry = max(renewals) + LEASE
    takeover = min(_stamp(e) for e in events if not _from_a(e) and e["objectRef"]["resource"] == "leases" and _ok(e))
    mine = [e for e in events if _from_a(e) and e["objectRef"]["resource"] == "configmaps"]

    def said(e: dict[str, Any]) -> str:
        code = (e.get("responseStatus") or {}).get("code")
        return f"{e['verb']} {e['objectRef'].get('name')} {code} +{_stamp(e) - expiry:.2f}s"

    effect = [said(e) for e in mine if _ok(e) and _stamp(e, "stageTimestamp") > expiry]
    started = [said(e) for e in mine if _stamp(e) > expiry]
    gaps: list[int] = []
    sends: list[int] = []
    exposure = 0.0
    if wire:
        gaps, sends, exposure = _window(b)
        gaps_a, sends_a, _ = _window(a)
        gaps, sends = gaps + gaps_a, sends + sends_a
        assert count_configmaps(env, ns, "v3") == OBJECTS, "an object is not at the version Git holds"
    r = Round(
        how,
        wire,
        effect,
        started,
        hooked,
        frozen_for,
        takeover - expiry,
        len(a.logged("frozen-replica: refused at the socket")),
        gaps,
        sends,
        exposure,
    )
    print(
        f"{how} round {n} ({'socket check' if wire else 'early check only'}): frozen {frozen_for:.1f} s, b took "
        f"over {r.took_over_after:+.2f} s after a's expiry; after it {len(effect)} write(s) took effect "
        f"{effect[:3]}, {len(started)} arrived {started[:3]}; hooked {hooked or '-'}; "
        f"{r.refused_at_socket} refused at the socket"
    )
    return r


def _us(ns: float) -> str:
    return f"{ns / 1000:.0f} µs" if ns >= 10_000 else f"{ns / 1000:.1f} µs"


def _quantile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


@pytest.mark.timeout(600)  # 4 rounds of two replicas, each a lease duration and three passes of 300 objects
def test_a_frozen_leader_sends_no_write_after_its_lease_expired(
    cluster: PrivateCluster, reliability: Recorder, tmp_path: Path
) -> None:
    rounds = [
        _round(cluster, tmp_path, i, how=how, wire=wire)
        for how, count in (("hook", HOOK_ROUNDS), ("sigstop", SIGSTOP_ROUNDS))
        for i in range(count)
        for wire in (False, True)
    ]
    for r in rounds:
        assert r.took_over_after >= -0.5, f"b took the Lease before a's expired: {r}"
    # The fault happened: with the early check alone, the v2 write admitted before the freeze lands over v3.
    for r in rounds:
        if r.how == "hook" and not r.wire:
            assert any(s.split()[1] == r.hooked for s in r.effect), f"the frozen write did not land late: {r}"
    # The fix: no write of the frozen replica takes effect after its Lease expired, and the one it was
    # frozen after admitting never even reaches the API server.
    fenced = [r for r in rounds if r.wire]
    for r in fenced:
        assert r.effect == [], f"a wrote after its Lease expired: {r.effect}"
        if r.how == "hook":
            assert r.started == [], f"a request of the frozen replica reached the server late: {r.started}"
            assert r.refused_at_socket == 1, "the admitted write was not stopped by the check at the socket"
    gaps = [g for r in fenced for g in r.window]
    sends = [s for r in fenced for s in r.sends]
    assert len(gaps) > 1000, len(gaps)
    p50, p99, worst = statistics.median(gaps), _quantile(gaps, 0.99), max(gaps)
    mean, s50 = statistics.fmean(gaps), statistics.median(sends)
    exposure = statistics.fmean(r.exposure for r in fenced)
    print(
        f"check -> SSLSocket.send: p50 {_us(p50)}, mean {_us(mean)}, p99 {_us(p99)}, max {_us(worst)} over "
        f"{len(gaps)} blocks; the send itself p50 {_us(s50)}; exposure {exposure:.3%} of b's busy time"
    )

    def late(how: str, wire: bool) -> str:
        rs = [r for r in rounds if r.how == how and r.wire is wire]
        landed = sum(len(r.effect) for r in rs)
        cut = sum(1 for r in rs for s in r.started if not s.split()[2].startswith("2"))
        return f"{landed} took effect in {sum(1 for r in rs if r.effect)} of {len(rs)} rounds ({cut} cut)"

    reliability.record(
        area="daemon",
        fault=f"two replicas of one source ({OBJECTS} ConfigMaps, lease {LEASE:g} s / renew deadline 3 s); the "
        f"leader frozen (SIGSTOP) while it applies the update v2: {HOOK_ROUNDS} rounds right after its write "
        f"fence admitted one object's write (a seam in the test's wrapper), {SIGSTOP_ROUNDS} rounds from "
        "outside mid-apply; Git moves to v3, the other replica takes the Lease and applies v3, then the first is "
        "thawed; every round run again with the check at the socket switched off (the early check alone)",
        outcome="thawed, the replica's admitted requests are refused in the connection right before their bytes "
        "would go to the socket (its Lease deadline passed while it was frozen), the rest of its pass is not "
        "attempted, it steps down (a request whose headers had left in the last moment is cut before its body: "
        "the API server answers 5xx and writes nothing); without the socket check its admitted v2 write lands "
        "over v3",
        checked="audit log: no write of the frozen replica took effect after its Lease expired (its last renewal "
        "the server received + lease duration), the admitted one never reached the server; every object at v3",
        figures="writes after Lease loss (and requests cut after their headers arrived late) with the check at the "
        f"socket: hook {late('hook', True)}, SIGSTOP "
        f"{late('sigstop', True)}; early check only: hook {late('hook', False)}, SIGSTOP "
        f"{late('sigstop', False)}. Last check to SSLSocket.send: p50 {_us(p50)}, mean {_us(mean)}, p99 "
        f"{_us(p99)}, max {_us(worst)} over {len(gaps)} blocks (check included), then the send call itself (GIL "
        f"given up, TLS encryption, the syscall, GIL taken back) p50 {_us(s50)}; some block between its check "
        f"and that call {exposure:.3%} of a replica's busy apply time (a lower bound of the chance a freeze at a "
        "random moment lets one block out: the call's own stretch before its syscall is not in it)",
    )
