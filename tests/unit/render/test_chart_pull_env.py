"""helm pull's environment (render/_chart_client._pull_env): private homes, none of the caller's HELM_* settings,
and a Docker config of its own whose one `auths` entry names no host, so helm's registry client neither falls
back to the controller user's ~/.docker/config.json nor goes looking for a native docker-credential helper
(oras-go detects one only for a config with no authentication configured): no login of the controller's user
reaches a pull, a tenant's above all."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from gitops_sync.render._chart_client import _pull_env


def test_helm_pull_gets_private_homes_and_a_docker_config_of_no_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text(json.dumps({"auths": {"registry.example": {"auth": "dTpw"}}}))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DOCKER_CONFIG", str(home / ".docker"))
    monkeypatch.setenv("HELM_REGISTRY_CONFIG", str(home / ".docker" / "config.json"))
    work = tmp_path / "work"
    work.mkdir()
    env = _pull_env(work)
    assert "HELM_REGISTRY_CONFIG" not in env
    assert env["DOCKER_CONFIG"] == str(work / "docker")
    assert {env[k] for k in ("HELM_CONFIG_HOME", "HELM_CACHE_HOME", "HELM_DATA_HOME")} <= {
        str(work / n) for n in ("config", "cache", "data")
    }
    config = work / "docker" / "config.json"
    doc = json.loads(config.read_text())
    assert list(doc) == ["auths"] and list(doc["auths"]) == ["gitops-sync.invalid"]  # configured: no helper lookup
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
