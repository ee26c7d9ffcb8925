"""What reaches stdout when things go wrong around it: many objects failing at once under `-o json` (one
document, whatever the pool threads log), and a reader that is gone before the first write (`| head`
closing early): the command's own exit code, no message. Rows go to RELIABILITY.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.reliability.workload import no_traceback
from tests.unit.cli.test_cli_closed_stdout import into_closed_pipe

if TYPE_CHECKING:
    from tests.conftest import KubeCluster
    from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster


def configmap(name: str, key: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {key: "v"}})


def gs(kube: KubeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args],
        env=kube.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_many_objects_failing_at_once_print_one_json_document(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    """40 ConfigMaps the API server rejects (422: a data key it refuses) and 10 good ones: the apply pool's
    threads log their failures at the same moment, the first lines of the process. Before the logging
    configuration was applied under a lock, a thread could log with structlog's default (console lines
    on stdout) and `jq` could not read the report."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for i in range(40):
        (repo / f"bad{i:02}.json").write_text(configmap(f"bad{i:02}", "not a valid key!"))
    for i in range(10):
        (repo / f"good{i:02}.json").write_text(configmap(f"good{i:02}", "ok"))
    runs = []
    for _ in range(3):  # the logging is deterministic now; three runs show it is not luck
        started = time.perf_counter()
        done = gs(kube, "sync", "--repo", str(repo), "-n", namespace, "--name", "many-fail", "-o", "json")
        runs.append((done, time.perf_counter() - started))
    for done, _ in runs:
        assert done.returncode == 2, done.stderr[-2000:]
        report = json.loads(done.stdout)  # exactly one JSON document on stdout, nothing before or after it
        failed = [o for o in report["objects"] if o["action"] == "error"]
        assert len(failed) == 40 and all(o["name"].startswith("bad") for o in failed)
        warnings = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
        assert sum(w.get("event") == "apply failed" for w in warnings) >= 40  # logged, on stderr, as JSON
        assert no_traceback(done.stdout, done.stderr)
    reliability.record(
        area="output",
        fault="`sync -o json` of 50 ConfigMaps of which 40 the API server rejects (422), 3 runs: the apply "
        "pool's threads log their failures at once, the process's first log lines",
        outcome="exit 2; stdout is one JSON document (40 objects `error`), every log line on stderr as JSON",
        checked="json.loads(stdout) of each run; 40 `apply failed` lines on stderr each run; no traceback",
        figures=f"stdout {min(len(d.stdout) for d, _ in runs)}-{max(len(d.stdout) for d, _ in runs)} bytes, "
        f"1 document each; {max(s for _, s in runs):.1f} s per sync at most",
    )


def test_a_reader_gone_before_the_first_write_ends_each_command_quietly(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    """`sync` applies, then its report meets the closed pipe: exit 0 and the objects are there; `diff` of
    a drifted object: exit 1; `render`: exit 0. Each used to be exit 2 "failed unexpectedly:
    BrokenPipeError" whenever the reader closed first (`render | head`: 3 of 5 runs)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for i in range(30):
        (repo / f"cm{i:02}.json").write_text(configmap(f"cm{i:02}", "ok"))
    common = ("--repo", str(repo), "-n", namespace, "--name", "closed-pipe")
    outcomes: dict[str, int] = {}
    for label, args, expected in [
        ("render", ("render", "--repo", str(repo)), 0),
        ("sync (table)", ("sync", *common), 0),
        ("sync -o json", ("sync", *common, "-o", "json"), 0),
    ]:
        done = into_closed_pipe(*args, env=kube.env)
        assert (done.returncode, done.stderr) == (expected, ""), (label, done.stderr)
        outcomes[label] = done.returncode
    live = kube.kubectl("-n", namespace, "get", "configmaps", "-o", "name").stdout.split()
    assert {f"configmap/cm{i:02}" for i in range(30)} <= set(live)  # sync applied before its report was cut
    kube.kubectl("-n", namespace, "patch", "configmap", "cm00", "--type", "merge", "-p", '{"data":{"ok":"drift"}}')
    for label, args in [("diff (table)", ("diff", *common)), ("diff -o json", ("diff", *common, "-o", "json"))]:
        done = into_closed_pipe(*args, env=kube.env)
        assert (done.returncode, done.stderr) == (1, ""), (label, done.stderr)
        outcomes[label] = done.returncode
    reliability.record(
        area="output",
        fault="stdout a pipe whose reader closed before the first write (`| head` done early), for render, "
        "sync and diff (table and -o json) of 30 ConfigMaps, diff after a drift",
        outcome="; ".join(f"{label}: exit {code}" for label, code in outcomes.items()) + "; nothing on stderr",
        checked="each command's own exit code and an empty stderr; the 30 ConfigMaps applied by the sync whose "
        "report was cut",
        figures=f"{len(outcomes)} commands, 0 bytes of stderr",
    )
