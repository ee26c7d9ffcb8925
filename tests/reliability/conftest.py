"""The fault and fuzz suite: every test records what it injected and what happened into RELIABILITY.md.

A test asks for the `reliability` fixture and calls `reliability.record(...)` after its assertions.
RELIABILITY.md (repository top) is rewritten at the end of a session that ran every test of this directory
and in which every one passed (none deselected by -k/-m, none skipped, none failed), so a partial run never
leaves a partial table and every "nothing lost" cell is an assertion that held (tests/reliability/recorder.py
decides; the last line of pytest's summary says whether the file was rewritten, or why not). It works
under pytest-xdist (`make test` runs this directory on several workers): rows travel in the reports.
`private_cluster` starts a control plane for one module, for faults the shared cluster must not see.
"""

from __future__ import annotations

import datetime
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.daemon_support import start_private_cluster, stop_private_cluster
from tests.reliability.alone import Lock
from tests.reliability.faults import PrivateCluster
from tests.reliability.recorder import Recorder, Run, plain, render, rows, verdict

__all__ = ["Recorder"]  # what the tests import from here

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUT = REPO / "RELIABILITY.md"

_run = Run()  # this process's view: a worker's, the xdist controller's (every worker's), or the only process's
_outcome: list[str] = []  # what became of RELIABILITY.md, for the terminal summary


@pytest.fixture
def reliability(request: pytest.FixtureRequest) -> Recorder:
    return Recorder(plain(request.node.nodeid), request.node.user_properties)


@pytest.fixture(scope="module")
def private_cluster(request: pytest.FixtureRequest) -> Iterator[PrivateCluster]:
    """A real control plane of this module's own (under the launcher's cache, so `.ci/run` can stop it)."""
    sessions = REPO / ".cache" / "local-cluster" / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix="fault-", dir=sessions))
    state.rmdir()
    try:
        env = start_private_cluster(state)
        yield PrivateCluster(state, env)
    finally:
        stop_private_cluster(state)
        shutil.rmtree(state, ignore_errors=True)


def _here(item: pytest.Item) -> bool:
    return Path(str(item.path)).resolve().is_relative_to(HERE)


# -- under pytest-xdist (`make test`: -n 3 --dist loadgroup) -------------------------------------------------


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `alone` tests join the group `alone`: one after another on one worker, which keeps the lock
    between them (see pytest_runtest_protocol). A module that starts a private cluster runs on one worker
    (one cluster for the module, as when run serially): its other tests join the group `private:<module>`."""
    private = {item.path for item in items if "private_cluster" in getattr(item, "fixturenames", ())}
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            if item.get_closest_marker("alone") is not None:  # xdist would join both names into a third group
                raise pytest.UsageError(f"{item.nodeid}: an `alone` test is in the group `alone`, no other")
            continue
        if item.get_closest_marker("alone") is not None:
            item.add_marker(pytest.mark.xdist_group("alone"))
        elif item.path in private:
            item.add_marker(pytest.mark.xdist_group(f"private:{item.path.stem}"))
    # The order xdist hands the groups out in (with --no-loadscope-reorder): the longest first (a private
    # cluster each), the `alone` group last (the tests in flight when it starts are the short ones).
    items.sort(key=lambda item: 2 if item.get_closest_marker("alone") else 0 if item.path in private else 1)


_lock: list[Lock] = []  # this worker's side of the run's `alone` lock


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outside pytest-timeout's timer: waiting is not running
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Every test holds the run's lock shared, an `alone` one exclusively (tests/reliability/alone.py)."""
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None:  # one process: nothing runs beside anything
        yield
        return
    if not _lock:
        _lock.append(Lock(REPO / ".cache" / "reliability-alone" / str(workerinput["testrunuid"])))
    alone = item.get_closest_marker("alone") is not None
    _lock[0].acquire(exclusive=alone)
    yield
    if not (alone and nextitem is not None and nextitem.get_closest_marker("alone") is not None):
        _lock[0].release()


def pytest_deselected(items: list[pytest.Item]) -> None:
    _run.deselected.update(plain(i.nodeid) for i in items if _here(i))


def pytest_collection_finish(session: pytest.Session) -> None:
    _run.selected.update(plain(i.nodeid) for i in session.items if _here(i))
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller learns what it collected at its end
        workeroutput["reliability"] = _run.collected()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _run.report(report.nodeid, report.when, report.outcome, report.user_properties)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """The xdist controller: a worker finished (its workeroutput holds what it collected)."""
    _run.worker(getattr(node, "workeroutput", {}).get("reliability", {}))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller decides
    why = verdict({p.name for p in HERE.glob("test_*.py")}, _run, int(exitstatus))
    if why:
        _outcome.append(f"RELIABILITY.md kept (not a complete, all-passed run: {why})")
        return
    table = rows(_run)
    OUT.write_text(render(table, datetime.datetime.now(datetime.UTC)))
    _outcome.append(f"RELIABILITY.md rewritten: {len(table)} rows from {len(_run.selected)} tests")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _outcome:
        terminalreporter.write_line(line)
