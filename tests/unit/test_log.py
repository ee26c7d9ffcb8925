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


# Thread A logs first: structlog is imported and the pending configuration applied, and A is held inside
# that (a hook on _apply). Thread B then logs its first line. B must wait for the configuration: the lock it
# waits on is observed (B reaching it sets `progressed`); on code without one, B gets through at once with
# structlog's default configuration (sets `progressed` when done). Either way A is released only after B
# either waits or has written: the interleaving is certain, no sleep.
_RACE = """
import sys, threading
from gitops_sync import log

log.configure("json", "info")
entered, release, progressed = threading.Event(), threading.Event(), threading.Event()
real_apply = log._apply

def held_apply(*args):
    entered.set()
    assert release.wait(30)
    real_apply(*args)

class ObservedLock:
    def __init__(self):
        self.real = threading.Lock()
    def __enter__(self):
        if threading.current_thread().name == "B":
            progressed.set()
        self.real.acquire()
    def __exit__(self, *exc):
        self.real.release()

log._apply = held_apply
log._lock = ObservedLock()

def first():
    log.get_logger("a").warning("from-a")

def second():
    try:
        log.get_logger("b").warning("from-b")
    finally:
        progressed.set()

a = threading.Thread(target=first, name="A")
a.start()
assert entered.wait(30)
b = threading.Thread(target=second, name="B")
b.start()
assert progressed.wait(30)
release.set()
a.join(30)
b.join(30)
"""


def test_a_second_thread_logging_while_the_configuration_is_applied_waits_for_it() -> None:
    """Before the lock, `_pending` was cleared before the configuration was applied: a pool thread logging
    in that window got structlog's default, console lines on stdout, and `sync -o json | jq` failed."""
    done = subprocess.run([sys.executable, "-c", _RACE], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout == ""
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert sorted(line["event"] for line in lines) == ["from-a", "from-b"]


_VALUES = """
import pathlib
from gitops_sync import log
log.configure("json", "info")
log.get_logger("probe").info("values", path=pathlib.Path("/a/b"), text="Grüße", big=2**70, error=ValueError("x"))
"""


def test_a_json_line_holds_any_value_and_writes_text_as_utf8() -> None:
    """Lines go through orjson (the daemon logs one per object of a cold apply); what it cannot write (a Path,
    an exception, an integer beyond 64 bits) is written as structlog writes it, and text is not escaped."""
    done = subprocess.run([sys.executable, "-c", _VALUES], capture_output=True, text=True, timeout=60, check=True)
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    assert "Grüße" in line  # stdlib json.dumps wrote "Gr\\u00fc\\u00dfe"
    got = json.loads(line)
    assert (got["path"], got["error"]) == ("PosixPath('/a/b')", "ValueError('x')")  # structlog's repr fallback
    assert (got["text"], got["big"]) == ("Grüße", 2**70)
