"""docs/secrets.md's two examples, run as written (bash -e, one after the other, in an empty directory) with
the real sops, age-keygen, git, ssh-keygen and the control plane: the Secret is applied, its value is in the
cluster and in no output; the unsigned commit is refused. A line that fails fails the test; so does a
docs/secrets.md without the blocks."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from secret_tools import MARKS, SecretTools, secret_tools_fixture  # noqa: F401  (the fixture `secret_tools`)

from tests.conftest import KubeCluster

pytestmark = MARKS
DOC = Path(__file__).resolve().parents[3] / "docs" / "secrets.md"
PASSWORD = "correct-horse-battery-staple"


def block(marker: str) -> str:
    match = re.search(re.escape(f"<!-- {marker} -->") + r"\n```sh\n(.*?)\n```\n", DOC.read_text(), re.S)
    assert match, f"docs/secrets.md has no ```sh block after <!-- {marker} -->"
    return match.group(1)


def test_the_secrets_doc_examples_run_as_written(
    kube: KubeCluster, namespace: str, tmp_path: Path, secret_tools: SecretTools
) -> None:
    script = block("secrets-example") + "\n" + block("signed-commits-example")
    env = {
        **kube.env,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(secret_tools.bin_dir), kube.env["PATH"]]),
        "NS": namespace,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    env.pop("SOPS_AGE_KEY_FILE", None)
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    secret = json.loads(kube.kubectl("get", "secret", "db", "-n", namespace, "-o", "json").stdout)
    assert base64.b64decode(secret["data"]["password"]).decode() == PASSWORD
    # Printed once, by the example's own kubectl line; never by gitops-sync, never on disk in the caches.
    assert r.stdout.count(PASSWORD) == 1 and PASSWORD not in r.stderr, r.stdout
    assert "signed by alice@example.com (SSH key SHA256:" in r.stdout
    assert "is not signed by a trusted key: git found no signature" in r.stderr
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path
