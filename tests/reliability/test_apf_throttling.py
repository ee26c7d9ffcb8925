"""API Priority and Fairness throttling the tool's user, on a private control plane.

A FlowSchema sends every request of one ServiceAccount to a PriorityLevelConfiguration with the smallest
share there is (nominalConcurrencyShares 1: 3 seats of the server's 600, nothing borrowed) that rejects
what does not fit at once, as a busy cluster's API server does to a low-priority client: 429 with
`Retry-After`. `sync` of 300 ConfigMaps at --concurrency 32 then meets 429s by the dozen. It used to
report most objects "429 Too many requests" and exit 2 at the first one; now each is sent again after
the time the server asks, as client-go and kubectl do, and the sync converges.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.cluster.client import Client
from gitops_sync.errors import TooManyRequestsError
from tests.integration.daemon_support import GitRepo, configmap, token_kubeconfig, wait_until
from tests.reliability.conftest import Recorder
from tests.reliability.faults import PrivateCluster

pytestmark = pytest.mark.cluster
N = 300
CONCURRENCY = 32
NS = "apf-throttled"
SA = "throttled"
LEVEL = "gitops-sync-test-throttled"


def _apply(env: dict[str, str], docs: list[dict[str, Any]]) -> None:
    subprocess.run(
        ["kubectl", "apply", "-f", "-"],
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )


def _throttled_user(cluster: PrivateCluster, path: Path) -> Path:
    """A ServiceAccount (cluster-admin on this private cluster) whose requests a Reject level of 3 seats
    takes; its kubeconfig."""
    env = cluster.env
    _apply(
        env,
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA, "namespace": NS}},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{NS}-{SA}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": NS}],
            },
            {
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                "kind": "PriorityLevelConfiguration",
                "metadata": {"name": LEVEL},
                "spec": {
                    "type": "Limited",
                    "limited": {
                        "nominalConcurrencyShares": 1,
                        "lendablePercent": 0,
                        "borrowingLimitPercent": 0,
                        "limitResponse": {"type": "Reject"},
                    },
                },
            },
            {
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                "kind": "FlowSchema",
                "metadata": {"name": LEVEL},
                "spec": {
                    "priorityLevelConfiguration": {"name": LEVEL},
                    "matchingPrecedence": 1000,  # before service-accounts (9000), after the system's own
                    "distinguisherMethod": {"type": "ByUser"},
                    "rules": [
                        {
                            "subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": SA, "namespace": NS}}],
                            "resourceRules": [
                                {
                                    "verbs": ["*"],
                                    "apiGroups": ["*"],
                                    "resources": ["*"],
                                    "clusterScope": True,
                                    "namespaces": ["*"],
                                }
                            ],
                            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                        }
                    ],
                },
            },
        ],
    )
    token = subprocess.run(
        ["kubectl", "create", "token", SA, "-n", NS, "--duration=1h"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return token_kubeconfig(cluster.kubeconfig, token, NS, path)


def _burst(kubeconfig: Path, n: int = 64) -> list[TooManyRequestsError]:
    """`n` concurrent GETs of this user that are never retried: the 429s they met."""
    rejected: list[TooManyRequestsError] = []
    lock = threading.Lock()
    with Client(kubeconfig, pool_size=n) as client:
        client.max_retries = 0

        def one() -> None:
            try:
                client.get(f"/api/v1/namespaces/{NS}/configmaps")
            except TooManyRequestsError as exc:
                with lock:
                    rejected.append(exc)

        threads = [threading.Thread(target=one) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    return rejected


def _cms(count: int, value: str) -> str:
    return "".join("---\n" + configmap(f"cm-{i:03d}", {"v": value}) for i in range(count))


def _audited_write_429s(cluster: PrivateCluster, since: datetime.datetime) -> int:
    """Writes of the throttled user answered 429 in the API server's audit log (it records writes only)."""
    user = f"system:serviceaccount:{NS}:{SA}"
    count = 0
    for line in (cluster.state_dir / "logs" / "audit.log").read_text(errors="replace").splitlines():
        if user not in line:
            continue
        ev = json.loads(line)
        received = datetime.datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if ev.get("user", {}).get("username") == user and ev.get("responseStatus", {}).get("code") == 429:
            count += received >= since
    return count


def test_sync_under_a_flowschema_that_throttles_its_user_converges(
    private_cluster: PrivateCluster, tmp_path: Path, reliability: Recorder
) -> None:
    kubeconfig = _throttled_user(private_cluster, tmp_path / "throttled.kubeconfig")
    # the API server's APF controller picks the new FlowSchema up within seconds: wait until a burst of
    # this user's requests meets 429s
    wait_until("429s for the throttled user", lambda: bool(_burst(kubeconfig)), 60, 1.0)
    burst = _burst(kubeconfig)

    repo = GitRepo(tmp_path / "repo", {"cms.yaml": _cms(N, "1")})
    env = {**private_cluster.env, "KUBECONFIG": str(kubeconfig)}
    args = ["sync", "--repo", str(repo.path), "-n", NS, "-o", "json", "--log-level", "info"]
    args += ["--concurrency", str(CONCURRENCY)]
    t0, wall = time.monotonic(), datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    proc = subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args], env=env, capture_output=True, text=True, timeout=600
    )
    took = time.monotonic() - t0
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    requests = next(
        (json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{") and '"requests"' in line), {}
    )
    failed = [o["message"] for o in report.get("objects", []) if o.get("action") == "error"]
    assert proc.returncode == 0, (proc.returncode, len(failed), failed[:3], report.get("errors"), proc.stderr[-2000:])
    throttled = int(requests.get("throttled", 0))
    assert throttled > 0, requests  # the sync did meet the throttling it survived
    assert "API server down" not in proc.stderr  # a 429 is an answer, not an outage: the breaker stays closed
    audited = _audited_write_429s(private_cluster, wall)

    with Client(private_cluster.kubeconfig) as admin:
        live = admin.get(f"/api/v1/namespaces/{NS}/configmaps")["items"]
        values = {
            i["metadata"]["name"]: (i.get("data") or {}).get("v")
            for i in live
            if i["metadata"]["name"].startswith("cm-")
        }
    assert values == {f"cm-{i:03d}": "1" for i in range(N)}

    again = subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr[-3000:]
    reliability.record(
        area="API server",
        fault="API Priority and Fairness: a FlowSchema sends the tool's ServiceAccount to a Reject priority level "
        f"of nominalConcurrencyShares 1 (3 seats, nothing borrowed); sync of {N} ConfigMaps at "
        f"--concurrency {CONCURRENCY}",
        outcome=f"exit 0 in {took:.1f} s, all {N} created; {throttled} answers 429 (Retry-After) retried after the "
        f"time asked ({audited} of them writes, by the API server's audit log); a re-sync exits 0",
        checked="every object applied with its value; a 429 never trips the breaker nor ends the command "
        "(before: exit 2, 251 of 300 objects '429 Too many requests')",
        figures=f"a burst of 64 unretried GETs: {len(burst)} rejected; sync: {throttled} retries, "
        f"reads {requests.get('reads')}, writes {requests.get('writes')}",
    )
