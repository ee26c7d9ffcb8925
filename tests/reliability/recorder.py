"""RELIABILITY.md's rows: recorded by the tests, written only from a complete run in which every test passed.

A test's rows travel in its reports (`user_properties`, which pytest-xdist serialises from a worker to the
controller), so the process that writes the file (the controller under xdist, else the one pytest process)
sees every row; what each worker collected and deselected reaches it in the worker's `workeroutput`.
`verdict` decides, as a pure function of what the session saw, whether the file may be rewritten.
"""

from __future__ import annotations

import datetime
import platform
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROPERTY = "reliability-row"  # the user_properties key of one row


@dataclass
class Row:
    area: str  # e.g. "API server", "etcd", "Git", "daemon", "input", "HTTP"
    fault: str  # what was injected or fed in
    outcome: str  # what the tool did (exit code, time, what it reported)
    checked: str  # the "nothing lost" assertion that held, in words
    figures: str = ""  # measured numbers, e.g. "exit 2 after 31.2 s; 0 deletes"
    test: str = ""  # the test's node id (without pytest-xdist's group suffix)


class Recorder:
    """What the `reliability` fixture gives a test: `record` a row after the test's assertions."""

    def __init__(self, nodeid: str, properties: list[tuple[str, object]]) -> None:
        self.nodeid = nodeid
        self.rows: list[Row] = []
        self._properties = properties  # the test item's user_properties: copied into each of its reports

    def record(self, *, area: str, fault: str, outcome: str, checked: str, figures: str = "") -> None:
        """Call after the test's assertions; the row counts only if the whole test passes."""
        row = Row(area, fault, outcome, checked, figures, test=self.nodeid)
        self.rows.append(row)
        self._properties.append((PROPERTY, asdict(row)))


def plain(nodeid: str) -> str:
    """`nodeid` without the `@group` suffix pytest-xdist's loadgroup adds (the rule xdist splits it by)."""
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") else nodeid


@dataclass
class Run:
    """What one session saw of the suite: the tests selected and deselected (by every process that collected)
    and each test's phases ("setup", "call", "teardown") with their outcomes, and the rows of its call."""

    selected: set[str] = field(default_factory=set)
    deselected: set[str] = field(default_factory=set)
    phases: dict[str, dict[str, str]] = field(default_factory=dict)
    rows: dict[str, list[Row]] = field(default_factory=dict)

    def report(self, nodeid: str, when: str, outcome: str, properties: Iterable[tuple[str, Any]]) -> None:
        """One test report (a worker's, or this process's own)."""
        nodeid = plain(nodeid)
        self.phases.setdefault(nodeid, {})[when] = outcome
        if when == "call":
            self.rows[nodeid] = [Row(**value) for key, value in properties if key == PROPERTY]

    def worker(self, output: dict[str, Any]) -> None:
        """What one worker collected (its `workeroutput`, see `collected`)."""
        self.selected.update(output.get("selected", ()))
        self.deselected.update(output.get("deselected", ()))

    def collected(self) -> dict[str, list[str]]:
        return {"selected": sorted(self.selected), "deselected": sorted(self.deselected)}


def _some(names: Iterable[str], limit: int = 3) -> str:
    names = sorted(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def verdict(files: Collection[str], run: Run, exitstatus: int) -> str:
    """Why `run` may not rewrite RELIABILITY.md; "" when it may: pytest exited 0, every file of `files` (test
    module names) had tests selected, none was deselected (-k, -m, --deselect, --lf), and every selected test
    passed its call with no phase failed or skipped."""
    if exitstatus != 0:
        return f"pytest exit status {exitstatus}"
    if not run.selected:
        return "no test of the suite was selected"
    if run.deselected:
        return f"{len(run.deselected)} tests deselected ({_some(run.deselected)})"
    not_run = set(files) - {Path(nodeid.split("::", 1)[0]).name for nodeid in run.selected}
    if not_run:
        return f"files with no test selected: {_some(not_run)}"
    bad: dict[str, list[str]] = {}
    for nodeid in run.selected:
        phases = run.phases.get(nodeid, {})
        if "failed" in phases.values():
            bad.setdefault("failed", []).append(nodeid)
        elif "skipped" in phases.values():
            bad.setdefault("skipped", []).append(nodeid)
        elif phases.get("call") != "passed":  # --collect-only, a crashed worker, an interrupted session
            bad.setdefault("never ran", []).append(nodeid)
    return "; ".join(f"{len(ids)} {what}: {_some(ids)}" for what, ids in sorted(bad.items()))


def rows(run: Run) -> list[Row]:
    """Every row of the selected tests, by area then test."""
    found = (row for nodeid in run.selected for row in run.rows.get(nodeid, []))
    return sorted(found, key=lambda r: (r.area, r.test))


def render(rows: list[Row], now: datetime.datetime) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    stamp = now.strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Reliability: faults injected and bad inputs tried",
        "",
        "Generated by `make reliability` (and `make test`) from `tests/reliability/`: one row per checked case,",
        'written only when the test passed, so every "nothing lost" cell is an assertion that held.',
        f"Last run: {stamp} on {platform.node() or 'this machine'} ({platform.machine()}, Python "
        f"{platform.python_version()}). Do not edit by hand.",
        "",
        "| area | fault or input | what happened | nothing lost (asserted) | figures | test |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = r.test.split("::", 1)[-1]
        lines.append(
            f"| {cell(r.area)} | {cell(r.fault)} | {cell(r.outcome)} | {cell(r.checked)} | "
            f"{cell(r.figures)} | `{cell(name)}` |"
        )
    return "\n".join(lines) + "\n"
