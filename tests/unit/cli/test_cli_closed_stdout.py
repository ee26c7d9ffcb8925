"""A reader that stops early (`render | head`, `diff -o json | head -c 100`): the command exits quietly with
the code it has anyway. The pipe here is closed before the command's first write, so every write fails with
EPIPE: the case is certain, not a race with the reader (no cluster needed: the one named is not listening).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.unit.cli.test_cli_bad_input import KUBECONFIG


def into_closed_pipe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI with stdout a pipe whose reading end is already closed (every write is EPIPE: no race)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "gitops_sync", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        os.close(write)


def repo_of(tmp_path: Path, objects: int) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for i in range(objects):
        (root / f"cm{i}.yaml").write_text(
            f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\ndata: {{a: b}}\n"
        )
    return root


def test_render_into_a_closed_pipe_exits_0_without_a_message(tmp_path: Path) -> None:
    """It was exit 2, "gitops-sync render failed unexpectedly: BrokenPipeError: [Errno 32] Broken pipe"."""
    done = into_closed_pipe("render", "--repo", str(repo_of(tmp_path, 50)))
    assert (done.returncode, done.stderr) == (0, "")


def test_a_failure_report_into_a_closed_pipe_keeps_its_exit_code_and_one_error_line(tmp_path: Path) -> None:
    """`diff -o json` that fails (the API server is not there) writes the error line on stderr, then its
    JSON document into the closed pipe: exit 2 as without the pipe, and nothing more on stderr (it was a
    second error line, "failed unexpectedly: BrokenPipeError", and click's exit 1)."""
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    repo = repo_of(tmp_path, 1)
    done = into_closed_pipe("diff", "--repo", str(repo), "--kubeconfig", str(tmp_path / "kubeconfig"), "-o", "json")
    assert done.returncode == 2
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]  # a log line precedes it
    assert "127.0.0.1:9 unreachable" in line, line
    assert "BrokenPipe" not in done.stderr and "unexpectedly" not in done.stderr and "Exception" not in done.stderr
