"""log.py: `configure` is honoured exactly, and structlog is imported only for a line that is written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_PROBE = """
import sys
from gitops_sync import log
log.configure("json", {level!r})
logger = log.get_logger("probe")
logger.debug("d", n=1)
logger.info("i", n=2)
print("imported-before-warning" if "structlog" in sys.modules else "not-imported", flush=True)
logger.warning("w", n=3)
logger.error("e", n=4)
"""


def _run(level: str) -> tuple[str, list[dict[str, object]]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(level=level)], capture_output=True, text=True, timeout=60, check=True
    )
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    return done.stdout.strip(), lines


def test_below_the_level_nothing_is_written_and_structlog_stays_out() -> None:
    state, lines = _run("warning")
    assert state == "not-imported"
    assert [(line["event"], line["level"]) for line in lines] == [("w", "warning"), ("e", "error")]


@pytest.mark.parametrize(("level", "events"), [("debug", ["d", "i", "w", "e"]), ("info", ["i", "w", "e"])])
def test_every_line_at_or_above_the_level_is_written(level: str, events: list[str]) -> None:
    state, lines = _run(level)
    assert state == "imported-before-warning"
    assert [line["event"] for line in lines] == events
    assert all(line["n"] for line in lines)


def test_error_level_drops_warnings() -> None:
    _, lines = _run("error")
    assert [line["event"] for line in lines] == ["e"]


def test_an_unknown_level_is_refused() -> None:
    from gitops_sync import log

    with pytest.raises(ValueError, match="unknown log level"):
        log.configure("json", "verbose")


_RACE = """
import sys, threading, time
from gitops_sync import log
log.configure("json", "warning")
real = log._apply
def slow_apply(*args):  # the first line's set-up takes a while; meanwhile another thread logs its first line
    other = threading.Thread(target=lambda: log.get_logger("other").warning("from-the-other-thread"))
    other.start()
    time.sleep(0.3)
    real(*args)
    threads.append(other)
threads = []
log._apply = slow_apply
log.get_logger("main").warning("from-the-main-thread")
for t in threads:
    t.join()
"""


def test_two_threads_first_lines_at_once_both_go_to_stderr_configured() -> None:
    """A sync's Lease renewal thread and its pass may log their first lines at the same moment: a line
    written before the configuration was applied went to stdout (structlog's default), into the report."""
    done = subprocess.run([sys.executable, "-c", _RACE], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == ""
    events = sorted(json.loads(line)["event"] for line in done.stderr.splitlines())
    assert events == ["from-the-main-thread", "from-the-other-thread"]
