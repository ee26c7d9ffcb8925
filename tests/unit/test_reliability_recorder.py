"""RELIABILITY.md's recorder (tests/reliability/recorder.py): rows travel in reports (as under pytest-xdist),
and the file is rewritten only from a complete run in which every test passed."""

from __future__ import annotations

import datetime
from typing import Any

from tests.reliability.recorder import PROPERTY, Recorder, Run, plain, render, rows, verdict

FILES = {"test_a.py", "test_b.py"}
A1 = "tests/reliability/test_a.py::test_one"
A2 = "tests/reliability/test_a.py::test_two[x]"
B1 = "tests/reliability/test_b.py::test_three"


def _passed(run: Run, nodeid: str, properties: list[tuple[str, Any]] | None = None) -> None:
    for when in ("setup", "call", "teardown"):
        run.report(nodeid, when, "passed", (properties or []) if when == "call" else [])


def _complete() -> Run:
    run = Run()
    run.worker({"selected": [A1, A2], "deselected": []})  # what two workers collected: the same set
    run.worker({"selected": [A1, A2, B1], "deselected": []})
    for nodeid in (A1, A2, B1):
        _passed(run, nodeid)
    return run


def test_a_complete_run_in_which_every_test_passed_may_rewrite_the_file() -> None:
    assert verdict(FILES, _complete(), 0) == ""


def test_a_failure_in_any_phase_a_skip_or_a_test_that_never_ran_keeps_the_file() -> None:
    for when in ("setup", "call", "teardown"):
        run = _complete()
        run.report(A1, when, "failed", [])
        assert verdict(FILES, run, 0).startswith("1 failed: " + A1), when
    run = _complete()
    run.report(B1, "call", "skipped", [])
    assert verdict(FILES, run, 0) == f"1 skipped: {B1}"
    run = _complete()
    del run.phases[A2]  # collected, never reported: --collect-only, a crashed worker, an interrupt
    assert verdict(FILES, run, 0) == f"1 never ran: {A2}"
    run = _complete()
    run.phases[A2].pop("call")  # its setup passed and nothing more came
    assert verdict(FILES, run, 0) == f"1 never ran: {A2}"


def test_a_partial_selection_or_a_failed_session_keeps_the_file() -> None:
    run = _complete()
    run.worker({"selected": [], "deselected": [A2]})  # -k, -m on one worker is -k, -m on all
    assert verdict(FILES, run, 0).startswith("1 tests deselected")
    run = _complete()
    run.selected.discard(B1)  # `pytest tests/reliability/test_a.py`
    assert verdict(FILES, run, 0) == "files with no test selected: test_b.py"
    assert verdict(FILES, Run(), 0) == "no test of the suite was selected"
    assert verdict(FILES, _complete(), 1) == "pytest exit status 1"  # e.g. a test of another directory failed
    assert verdict(FILES, _complete(), 2) == "pytest exit status 2"  # interrupted


def test_rows_travel_in_the_call_report_under_the_test_id_without_the_xdist_group() -> None:
    properties: list[tuple[str, object]] = [("other", 1)]
    rec = Recorder(plain(A1 + "@second-cluster"), properties)
    rec.record(area="etcd", fault="restarted", outcome="converged", checked="uids kept", figures="3 s")
    rec.record(area="API server", fault="frozen", outcome="exit 2", checked="nothing pruned")
    run = _complete()
    run.report(A1 + "@second-cluster", "call", "passed", list(properties))  # as the xdist controller gets it
    table = rows(run)
    assert [(r.area, r.test) for r in table] == [("API server", A1), ("etcd", A1)]
    assert [key for key, _ in properties] == ["other", PROPERTY, PROPERTY]
    text = render(table, datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC))
    assert "| etcd | restarted | converged | uids kept | 3 s | `test_one` |" in text
    assert "Last run: 2026-01-02 03:04 UTC" in text


def test_the_group_suffix_is_cut_as_xdist_splits_it() -> None:
    assert plain("t.py::test_x@crds") == "t.py::test_x"
    assert plain("t.py::test_x[a@b]") == "t.py::test_x[a@b]"  # an @ inside the parameter id stays
    assert plain("t.py::test_x[a@b]@timing") == "t.py::test_x[a@b]"
