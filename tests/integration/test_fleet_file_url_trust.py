"""GitSyncs whose spec.repository is a `file://` URL of a repository someone else writes, on the real daemon
and API server: nothing that repository configures runs as the controller (fsmonitor, filters, hooks,
packObjectsHook, sshCommand, gpg, credential helper; a partial clone's lazy fetch with the controller's
environment asking for lazy fetches). Real git; each configured command leaves a marker. The unit tests of
the same (tests/unit/source/test_file_url_trust.py) call fetch in-process; this one is the controller."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, wait_until
from tests.integration.test_fleet import condition, crd, fleet_args, gitsync
from tests.unit.source.test_file_url_trust import _more_commands, _partial_clone
from tests.unit.source.test_local_repository_trust import hostile

__all__ = ["crd"]  # the module fixture, used by name

pytestmark = pytest.mark.cluster


def _with_url(doc: str, url: str) -> str:
    parsed = json.loads(doc)
    parsed["spec"]["repository"] = url
    return json.dumps(parsed) + "\n"


def test_file_url_gitsyncs_run_nothing_their_repositories_configure(
    crd: None, kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "partial").mkdir()
    top, markers = hostile(tmp_path / "full", "include")
    _more_commands(tmp_path / "full", top, markers)
    partial, lazy_markers = _partial_clone(tmp_path / "partial", "uploadpack")
    docs = [
        _with_url(gitsync("hostile", namespace, top, path="app"), f"file://{top}"),
        _with_url(gitsync("partial", namespace, partial), f"file://{partial}"),
    ]
    kube.kubectl("apply", "-f", "-", input="".join(docs))
    env = {**kube.env, "GIT_NO_LAZY_FETCH": "0"}  # the controller's environment asks for lazy fetches
    args = fleet_args(namespace, tmp_path, "--cache-dir", str(tmp_path / "cache"))
    with Daemon(args, env, tmp_path / "fleet.log") as d:
        d.wait_ready(90)
        wait_until("hostile Ready", lambda: condition(kube, namespace, "hostile", "Ready").get("status") == "True", 90)
        cm = kube.find("configmap", "blob", namespace)
        assert cm is not None and kube.find("configmap", "smudged", namespace) is None

        def refused() -> bool:
            return "promisor remote" in condition(kube, namespace, "partial", "Ready").get("message", "")

        wait_until("partial refused", refused, 90)
        message = condition(kube, namespace, "partial", "Ready")["message"]
        assert f"file://{partial}" in message and "Traceback" not in message
    assert sorted(os.listdir(markers)) == [] and sorted(os.listdir(lazy_markers)) == []
