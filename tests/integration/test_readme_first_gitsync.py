"""README's "Your first GitSync" walkthrough, run as written (bash -e) against the real control plane: the
newcomer's path from `make demo` to a tenant GitSync that applies, prunes what left Git and, deleted,
deletes what it applied. A line that fails fails the test; so does a README without the block."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import FIXED_NAMES, KubeCluster
from tests.integration.daemon_support import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- first-gitsync -->"


def walkthrough() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    match = re.search(re.escape(MARKER) + r"\n```sh\n(.*?)\n```\n", text, re.S)
    assert match, f"README.md has no ```sh block after {MARKER}"
    return match.group(1)


@FIXED_NAMES
def test_the_readme_first_gitsync_walkthrough_runs_as_written(kube: KubeCluster) -> None:
    script = walkthrough()
    assert "gitops-sync run" in script and "kubectl -n team-a delete gitsync" in script
    env = {
        **kube.env,
        "GITOPS_SYNC_HTTP_ADDR": f"127.0.0.1:{free_port()}",  # the controller's port, free on this machine
    }
    kube.kubectl("delete", "namespace", "team-a", "--ignore-not-found", "--wait=true", timeout=120)
    try:
        r = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
        )
        log = Path("/tmp/gitops-sync.log")
        tail = log.read_text()[-3000:] if log.exists() else ""
        assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}\ncontroller:\n{tail}"
        assert "greeter" in r.stdout and "True" in r.stdout, r.stdout  # `gitops-sync get`: READY True
        assert "reconciled: Ready=True" in r.stdout, r.stdout
    finally:
        subprocess.run(["pkill", "-f", "allow-local-repository /tmp/gitops-repos"], check=False)
        kube.kubectl("delete", "namespace", "team-a", "--ignore-not-found", "--wait=false", check=False)
