"""Hostile configuration files the repository controls, through the real command line: `.gitops-sync.yaml`
(read by `diff`/`sync`), a chart's Chart.yaml and values.yaml (read by helm, checked by us first). Each is
read by the one bounded loader of render/_yaml: exit 2 at once, one error line naming the file and the
problem, a small message and a small process. The figures (time, message bytes, peak RSS of the
process) go to RELIABILITY.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.reliability.workload import no_traceback

if TYPE_CHECKING:
    from tests.conftest import KubeCluster
    from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster  # `diff` reads the rules file after it has reached the cluster


def alias_list(levels: int) -> str:
    """A flow list of `levels` anchors, each ten aliases of the one before: 10**levels nodes expanded."""
    anchors = ["&a0 [x, x, x, x, x, x, x, x, x, x]"]
    anchors += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return f"[{', '.join(anchors)}]"


CM = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n"
CHART = "apiVersion: v2\nname: web\nversion: 0.1.0\n"
TEMPLATE = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n"


@dataclass(frozen=True)
class Case:
    id: str
    fault: str
    command: str  # diff or render
    files: dict[str, str]
    message: str  # the error line, after `error: `
    before: str  # what the previous code did, measured


CASES = [
    Case(
        "rules-alias-bomb",
        "`.gitops-sync.yaml` whose rule's `mode` is an 8-level alias bomb (10^8 nodes expanded)",
        "diff",
        {"cm.yaml": CM, ".gitops-sync.yaml": f"ignore:\n  - paths: [.data]\n    mode: {alias_list(8)}\n"},
        ".gitops-sync.yaml: document 1 expands to more than 100000 YAML nodes in this file (aliases expanded); "
        "refusing to load it",
        "before, plain yaml.safe_load: 7 levels (410 bytes) made a 58 MB message in 2.4 s at 314 MB RSS, "
        "8 levels ran out of memory",
    ),
    Case(
        "rules-deep",
        "`.gitops-sync.yaml` with 5,000 nested brackets",
        "diff",
        {"cm.yaml": CM, ".gitops-sync.yaml": "ignore: " + "[" * 5000 + "]" * 5000 + "\n"},
        ".gitops-sync.yaml:1:1008: invalid YAML: while increasing flow level started at line 1, column 1008: "
        "exceeded maximum nesting depth",
        "before: RecursionError, 'gitops-sync diff failed unexpectedly'",
    ),
    Case(
        "chart-yaml-alias-bomb",
        "a chart's Chart.yaml with a 9-level alias bomb",
        "render",
        {"web/Chart.yaml": CHART + f"keywords: {alias_list(9)}\n", "web/templates/cm.yaml": TEMPLATE},
        "web/Chart.yaml: document 1 expands to more than 100000 YAML nodes in this file (aliases expanded); "
        "refusing to load it",
        "before: handed to helm unchecked",
    ),
    Case(
        "values-alias-bomb",
        "a chart's values.yaml with a 9-level alias bomb",
        "render",
        {"web/Chart.yaml": CHART, "web/values.yaml": f"x: {alias_list(9)}\n", "web/templates/cm.yaml": TEMPLATE},
        "web/values.yaml: document 1 expands to more than 1000000 YAML nodes in this file (aliases expanded); "
        "refusing to load it",
        "before: handed to helm unchecked",
    ),
]


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float
    max_rss_kib: int  # of this process alone (wait4), not of earlier children


def run_cli(kube: KubeCluster, *args: str) -> Run:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gitops_sync", *args], env=kube.env, stdin=subprocess.DEVNULL, stdout=out, stderr=err
        )
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            proc.returncode = 0  # reaped by wait4: Popen must not wait for it again
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        return Run(os.waitstatus_to_exitcode(status), out.read(), err.read(), seconds, usage.ru_maxrss)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hostile_configuration_file_is_refused_at_once_naming_it(
    case: Case, kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    repo = tmp_path / "repo"
    for name, text in case.files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    args = ["--repo", str(repo)] + (["-n", namespace, "--name", "bad-config"] if case.command == "diff" else [])
    run = run_cli(kube, case.command, *args)
    assert run.code == 2, run.stderr[-2000:]
    assert no_traceback(run.stdout, run.stderr) and "unexpectedly" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {case.message}"], run.stderr[-2000:]
    assert run.seconds < 10 and run.max_rss_kib < 200 * 1024
    reliability.record(
        area="bounds",
        fault=case.fault,
        outcome=f"`{case.command}`: exit 2, one error line naming the file and the limit; no traceback",
        checked=f"refused by the bounded loader before anything expanded it ({case.before})",
        figures=f"exit 2 in {run.seconds * 1000:.0f} ms (Python start-up included); message {len(errors[0])} bytes; "
        f"peak RSS {run.max_rss_kib / 1024:.0f} MB",
    )
