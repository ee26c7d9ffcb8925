"""The fleet controller refuses a GitSync CRD that would drop spec fields it reads (daemon/fleet/crd.py).

An API server prunes every field its CRD's schema does not declare, silently: with a CRD from before
`spec.kubeConfig`, a GitSync meant for another cluster is stored without it and would be applied (and pruned)
on the controller's own cluster. On `second_kube` (the CRD is cluster-scoped: the shared cluster's other tests
must never see an old one): the controller does not start on such a CRD (exit 2, the CRD, the field and the
fix named, nothing applied), stops when the CRD is replaced by such a one while it runs, and refuses the one
GitSync that reads a nested field its CRD lacks.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SECOND_CLUSTER, KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_established, wait_until
from tests.integration.test_fleet import CRD, cm_data, condition, fleet_args, gitsync, wait_ready

pytestmark = [pytest.mark.cluster, SECOND_CLUSTER]

CRD_NAME = "gitsyncs.gitops-sync.io"


def _crd_without(*paths: tuple[str, ...]) -> str:
    """The shipped CRD with the spec properties at `paths` removed (as an older release's CRD)."""
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load(CRD.read_text()))
    for path in paths:
        node = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        for name in path[:-1]:
            node = node["properties"][name]
        del node["properties"][path[-1]]
    return json.dumps(doc)


def _install(kube: KubeCluster, crd: str | None) -> None:
    if crd is None:
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    else:
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=crd)
    wait_established(kube.env, CRD_NAME, 60)


def _secret(name: str, ns: str) -> str:
    doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}}
    return json.dumps({**doc, "stringData": {"value": "not read", "config": "not read"}}) + "\n"


def _exits(d: Daemon, timeout: float) -> tuple[int, float, str]:
    t0 = time.monotonic()
    try:
        code = d.proc.wait(timeout)
    except Exception:
        pytest.fail(f"the controller kept running on an outdated CRD:\n{d.log_tail()}")
    took = time.monotonic() - t0
    d.stop()
    return code, took, d.log_path.read_text(errors="replace")


def _assert_named(text: str, *fields: str) -> None:
    error = [line for line in text.splitlines() if line.startswith("error: ")]
    assert len(error) == 1, text[-3000:]
    for want in (CRD_NAME, *fields, "kubectl apply -f deploy/kubernetes/crd/"):
        assert want in error[0], error[0]
    assert "Traceback" not in text


def test_a_crd_that_drops_a_field_the_controller_reads_is_refused(second_kube: KubeCluster, tmp_path: Path) -> None:
    home, ns = second_kube, f"crd-{uuid.uuid4().hex[:6]}"
    repo = GitRepo(tmp_path / "app", {"app.yaml": configmap("app", {"v": "1"})})
    try:
        _install(home, _crd_without(("kubeConfig",)))
        home.kubectl("create", "namespace", ns)
        remote = gitsync("remote", ns, repo.path, prune=True, kubeConfig={"secretRef": {"name": "target"}})
        # kubectl refuses an unknown field itself (--validate=strict, its default); any other client (client-go
        # asks for nothing: the server warns and drops it; Helm; a GitOps tool applying GitSyncs) does not.
        home.kubectl("apply", "--validate=false", "-f", "-", input=_secret("target", ns) + remote)
        # The premise: the API server dropped spec.kubeConfig without a word.
        assert "kubeConfig" not in home.get("gitsync", "remote", ns)["spec"]

        # 1. At start: exit 2 before any GitSync is acted on.
        code, took, text = _exits(Daemon(fleet_args(ns, tmp_path), home.env, tmp_path / "start.log"), 60)
        assert code == 2, text[-3000:]
        _assert_named(text, "spec.kubeConfig")
        assert cm_data(home, ns, "app") is None  # not applied to this cluster
        assert not [c for c in home.list("configmaps", ns) if c["metadata"]["name"].startswith("gitsync-")]
        assert not home.get("gitsync", "remote", ns).get("status")
        print(f"refused to start in {took:.1f} s")

        # 2. While it runs: the CRD replaced by the old one (a downgrade) stops it.
        _install(home, None)
        home.kubectl("delete", "gitsync", "remote", "-n", ns)
        home.kubectl("apply", "-f", "-", input=gitsync("local", ns, repo.path, prune=True))
        d = Daemon(fleet_args(ns, tmp_path), home.env, tmp_path / "run.log")
        d.wait_ready(60)
        wait_ready(home, ns, "local")
        _install(home, _crd_without(("kubeConfig",)))
        code, took, text = _exits(d, 60)
        assert code == 2, text[-3000:]
        _assert_named(text, "spec.kubeConfig")
        print(f"stopped {took:.1f} s after the CRD was downgraded")

        # 3. A nested field missing (secretRef.key): the controller runs; the GitSync reading it is refused.
        _install(home, _crd_without(("kubeConfig", "secretRef", "key")))
        keyed = gitsync("keyed", ns, repo.path, kubeConfig={"secretRef": {"name": "target", "key": "config"}})
        home.kubectl("apply", "--validate=false", "-f", "-", input=keyed)
        assert "key" not in home.get("gitsync", "keyed", ns)["spec"]["kubeConfig"]["secretRef"]
        with Daemon(fleet_args(ns, tmp_path), home.env, tmp_path / "nested.log") as d:
            d.wait_ready(60)
            wait_ready(home, ns, "local")
            wait_until(
                "keyed refused",
                lambda: condition(home, ns, "keyed", "Ready").get("reason") == "CRDOutdated",
                60,
                interval=0.2,
            )
            msg = condition(home, ns, "keyed", "Ready")["message"]
            assert "spec.kubeConfig.secretRef.key" in msg and CRD_NAME in msg, msg
            assert not (home.get("gitsync", "keyed", ns).get("status") or {}).get("cluster")
    finally:
        _install(home, None)
        home.kubectl("delete", "namespace", ns, "--wait=false", check=False)
