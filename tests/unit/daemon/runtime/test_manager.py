"""The manager starts components group by group and stops them in exactly the reverse order, in one place
(daemon/runtime/manager.py); both controllers declare theirs with it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gitops_sync.daemon.fleet.controller import Fleet
from gitops_sync.daemon.process.controller import DaemonOptions
from gitops_sync.daemon.runtime.manager import Group, Manager
from gitops_sync.daemon.runtime.supervisor import Supervisor
from gitops_sync.daemon.single.controller import Daemon
from gitops_sync.engine import SourceOptions
from tests.unit.fakes import _KUBECONFIG


def test_start_follows_the_groups_and_stop_is_its_reverse() -> None:
    seen: list[str] = []
    m = Manager(Supervisor())
    for group, name in [(Group.TRIGGERS, "poll"), (Group.SERVING, "http"), (Group.WORKERS, "worker")]:
        m.add(group, name, start=lambda n=name: seen.append(f"start {n}"), stop=lambda n=name: seen.append(f"stop {n}"))
    m.add(Group.CLIENTS, "clients", stop=lambda: seen.append("stop clients"))
    m.start()
    assert m.stop() and not m.stop(), "a second stop does nothing"
    assert seen == [
        "start http",
        "start worker",
        "start poll",
        "stop poll",
        "stop worker",
        "stop http",
        "stop clients",
    ]
    assert m.stopping and m.wait(0)


def test_a_component_that_fails_to_stop_does_not_keep_the_others_running() -> None:
    stopped: list[str] = []
    m = Manager(Supervisor())
    m.add(Group.CLIENTS, "clients", stop=lambda: stopped.append("clients"))

    def broken() -> None:
        raise RuntimeError("cannot stop")

    m.add(Group.WORKERS, "worker", stop=broken)
    m.stop()
    assert stopped == ["clients"]


@pytest.fixture
def opts(tmp_path: Path) -> DaemonOptions:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(_KUBECONFIG)
    return DaemonOptions(
        source=SourceOptions(repo="https://git.example/r.git"), kubeconfig=kubeconfig, http_addr="127.0.0.1:0"
    )


def test_the_single_source_daemon_drains_its_pass_before_the_lease_and_the_cache_go(opts: DaemonOptions) -> None:
    d = Daemon(dataclasses.replace(opts, leader_elect=True))
    try:
        stop = [name for _group, name in reversed(d.manager.plan())]
    finally:
        d.http.stop()
    assert stop.index("git-poll") < stop.index("reconciler") < stop.index("leader") < stop.index("watch-cache")
    assert stop.index("watch-cache") < stop.index("events") < stop.index("http") < stop.index("clients")
    assert stop[0] == "supervisor", "nothing is restarted while it stops"


def test_the_fleet_stops_renewing_before_the_drain_and_gives_its_leases_up_after(opts: DaemonOptions) -> None:
    f = Fleet(dataclasses.replace(opts, leader_elect=True, source=SourceOptions(repo="")))
    try:
        stop = [name for _group, name in reversed(f.manager.plan())]
    finally:
        f.http.stop()
        f.scheduler.shutdown()
    assert stop.index("shards") < stop.index("dispatcher") < stop.index("shard-leases") < stop.index("watch-cache")
    assert stop.index("gitsync-watch") < stop.index("dispatcher") and stop[-1] == "clients"
