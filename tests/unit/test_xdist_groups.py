"""`--dist loadgroup` runs the tests of one `xdist_group` on one worker: tests/conftest.py puts the group on
the node id where pytest 9.2 reads it (pytest-xdist 3.8 writes it where pytest no longer looks, and every
group was silently ignored: pytest-xdist issue 1386). A real pytest-xdist run of a small test file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_tests_of_a_group_run_one_after_another_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.xdist_group('g')\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "def test_in_the_group(i):\n    pass\n\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "def test_free(i):\n    pass\n"
    )
    cmd = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-n", "2"]
    cmd += ["--dist", "loadgroup", "-v", "test_grouped.py"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"}  # tests.conftest importable; whole ids
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False)
    passed = [line.split() for line in r.stdout.splitlines() if " PASSED " in line]
    assert len(passed) == 8, r.stdout[-3000:] + r.stderr[-3000:]
    group = [(parts[0], parts[-1]) for parts in passed if "test_in_the_group" in parts[-1]]  # "[gw0]", node id
    assert all(nodeid.endswith("@g") for _, nodeid in group), group
    grouped = {worker for worker, _ in group}
    assert len(grouped) == 1, f"the group's tests ran on {sorted(grouped)}"
