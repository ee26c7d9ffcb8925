"""The registries cluster.py starts are real and locked: TLS from their own CA only, basic auth, and
`registry-down` stops what `registry-up` started."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from chart_registries import LAUNCHER, Registries


def _status(url: str, ca: Path | None, auth: tuple[str, str] | None) -> int:
    ctx = ssl.create_default_context(cafile=str(ca) if ca else None)
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.parametrize("kind", ["registry", "chart-repo"])
def test_tls_from_its_own_ca_and_basic_auth(registries: Registries, kind: str) -> None:
    url = f"https://{registries.oci}/v2/" if kind == "registry" else f"{registries.chart_repo}/index.yaml"
    if kind == "chart-repo":
        registries.publish_https(
            registries.package(Path(__file__).parents[2] / "fixtures/charts/hello", "0.0.1", registries.home / "p")
        )
    right = (registries.username, registries.password)
    assert _status(url, registries.ca_file, right) == 200
    assert _status(url, registries.ca_file, None) == 401
    assert _status(url, registries.ca_file, (registries.username, "wrong")) == 401
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        _status(url, None, right)  # the system's CAs do not trust it


def test_registry_down_stops_what_registry_up_started(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run = [sys.executable, str(LAUNCHER), "--dir", str(state)]
    up = subprocess.run([*run, "registry-up", "--auto-ports"], capture_output=True, text=True, check=False)
    try:
        assert up.returncode == 0, up.stderr
        info = json.loads(up.stdout)
        pids = [json.loads(f.read_text())["pid"] for f in (state / "pids").glob("*.pid")]
        assert len(pids) == 2 and all(Path(f"/proc/{p}").exists() for p in pids)
        assert (state / "password").stat().st_mode & 0o077 == 0  # the password file is the owner's only
        again = subprocess.run([*run, "registry-up", "--auto-ports"], capture_output=True, text=True, check=False)
        assert again.returncode == 0 and "already up" in again.stderr and json.loads(again.stdout) == info
    finally:
        down = subprocess.run([*run, "registry-down"], capture_output=True, text=True, check=False)
    assert down.returncode == 0, down.stderr
    assert not state.exists()
    assert not any(os.path.exists(f"/proc/{p}") and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z" for p in pids)
