"""The fleet controller on the real API server: GitSync objects, their status, the CLI, tenants, shards."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_established, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD = REPO_ROOT / "deploy" / "kubernetes" / "crd" / "gitsyncs.gitops-sync.io.yaml"


@pytest.fixture(scope="module")
def crd(kube: KubeCluster) -> None:
    """The CRD as shipped (cluster-scoped, shared by every test; applying it again changes nothing)."""
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(kube.env, "gitsyncs.gitops-sync.io", 60)


def gitsync(name: str, namespace: str, repo: Path, **spec: Any) -> str:
    return (
        json.dumps(
            {
                "apiVersion": "gitops-sync.io/v1alpha1",
                "kind": "GitSync",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"repository": str(repo), "interval": "1h", **spec},
            }
        )
        + "\n"
    )


def fleet_args(namespace: str, repos: Path, *more: str) -> list[str]:
    """`run` as the fleet of `namespace`, its GitSyncs' local repositories allowed under `repos`."""
    return ["--watch-namespace", namespace, "--allow-local-repository", str(repos), *more]


def gs_status(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = kube.get("gitsync", name, namespace).get("status") or {}
    return status


def condition(kube: KubeCluster, namespace: str, name: str, ctype: str) -> dict[str, Any]:
    for c in gs_status(kube, namespace, name).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return {}


def wait_ready(kube: KubeCluster, namespace: str, name: str, timeout: float = 60) -> None:
    """What `kubectl wait --for=condition=Ready gitsync/<name>` waits for: Ready True, for this generation."""

    def ready() -> bool:
        doc = kube.get("gitsync", name, namespace)
        generation = doc["metadata"].get("generation")
        status = doc.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        return (
            ready.get("status") == "True"
            and status.get("observedGeneration", generation) == generation
            and ready.get("observedGeneration", generation) == generation
        )

    wait_until(f"gitsync/{name} Ready", ready, timeout, interval=0.1)


def cm_data(kube: KubeCluster, namespace: str, name: str) -> dict[str, str] | None:
    doc = kube.find("configmap", name, namespace)
    if doc is None:
        return None
    data: dict[str, str] = doc.get("data") or {}
    return data


def tenant_account(kube: KubeCluster, namespace: str) -> None:
    """ServiceAccount `tenant` that may do anything with ConfigMaps of `namespace` and nothing else."""
    kube.kubectl("create", "serviceaccount", "tenant", "-n", namespace)
    kube.kubectl(
        "create",
        "role",
        "tenant",
        "-n",
        namespace,
        "--verb=get,list,watch,create,update,patch,delete",
        "--resource=configmaps",
    )
    kube.kubectl(
        "create", "rolebinding", "tenant", "-n", namespace, "--role=tenant", f"--serviceaccount={namespace}:tenant"
    )


def tenant_and_admin(
    kube: KubeCluster, namespace: str, other: str, tmp_path: Path, theirs: str, data: dict[str, str], **spec: Any
) -> None:
    """GitSyncs `tenant` (ServiceAccount tenant: ConfigMaps of `namespace` only) declaring ConfigMap mine in
    `namespace` and ConfigMap `theirs` (`data`) in `other`, and `admin` (the controller's own rights)
    writing admin-cm into `other`; `spec`: more of the tenant's spec."""
    tenant_account(kube, namespace)
    tenant = GitRepo(
        tmp_path / "tenant",
        {
            "mine.yaml": configmap("mine", {"a": "1"}),
            f"{theirs}.yaml": configmap(theirs, data, namespace=other),
        },
    )
    admin = GitRepo(tmp_path / "admin", {"cm.yaml": configmap("admin-cm", {"b": "2"}, namespace=other)})
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input="---\n".join(
            [
                gitsync("tenant", namespace, tenant.path, serviceAccountName="tenant", **spec),
                gitsync("admin", namespace, admin.path),
            ]
        ),
    )


def admin_applied(kube: KubeCluster, d: Daemon, namespace: str, other: str) -> None:
    """The fleet is ready and the `admin` source of `tenant_and_admin` has applied admin-cm."""
    d.wait_ready(60)
    wait_ready(kube, namespace, "admin")
    assert cm_data(kube, other, "admin-cm") == {"b": "2"}


def gs_cli(kube: KubeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args, "--kubeconfig", str(kube.kubeconfig)],
        env=kube.env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_crd_rejects_an_invalid_spec(kube: KubeCluster, crd: None, namespace: str, tmp_path: Path) -> None:
    bad = gitsync("bad", namespace, tmp_path, mode="sometimes")
    r = kube.kubectl("apply", "-f", "-", input=bad, check=False)
    assert r.returncode != 0 and "spec.mode" in r.stderr, r.stderr
    r = kube.kubectl("apply", "-f", "-", input=gitsync("escape", namespace, tmp_path, path="../etc"), check=False)
    assert r.returncode != 0 and "path must be relative" in r.stderr, r.stderr


def test_many_sources_one_daemon_status_cli_and_isolation(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    ok = GitRepo(tmp_path / "ok", {"cm.yaml": configmap("ok-settings", {"color": "blue"})})
    broken = GitRepo(tmp_path / "broken", {"cm.yaml": "kind: ConfigMap\nmetadata: {name: [unclosed\n"})
    third = GitRepo(tmp_path / "third", {"cm.yaml": configmap("third", {"n": "3"})})
    manifests = "---\n".join(
        [
            gitsync("app", namespace, ok.path),
            gitsync("broken", namespace, broken.path),
            gitsync("after-broken", namespace, third.path, dependsOn=[{"name": "broken"}]),
        ]
    )
    kube.kubectl("apply", "-f", "-", input=manifests)
    with Daemon(fleet_args(namespace, tmp_path, "--workers", "2"), kube.env, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        # kubectl wait understands the status (observedGeneration + Ready).
        kube.kubectl("wait", "--for=condition=Ready", "gitsync/app", "-n", namespace, "--timeout=60s", timeout=70)
        assert cm_data(kube, namespace, "ok-settings") == {"color": "blue"}
        status = gs_status(kube, namespace, "app")
        assert status["observedGeneration"] == 1 and status["lastAppliedRevision"] == ok.repo.head.commit.hexsha
        assert status["inventory"]["objects"] == 1 and status["counts"]["drifted"] == 0
        # The broken source is Stalled with a message naming the file; the others are unaffected.
        wait_until(
            "broken to be Stalled", lambda: condition(kube, namespace, "broken", "Stalled").get("status") == "True", 60
        )
        assert "cm.yaml" in gs_status(kube, namespace, "broken")["lastError"]
        wait_until(
            "after-broken to wait for it",
            lambda: condition(kube, namespace, "after-broken", "Ready").get("reason") == "DependencyNotReady",
            30,
        )
        # Drift on one source is corrected by the shared watch cache.
        kube.kubectl(
            "patch", "configmap", "ok-settings", "-n", namespace, "--type=merge", "-p", '{"data":{"color":"red"}}'
        )
        took = wait_until("drift corrected", lambda: cm_data(kube, namespace, "ok-settings") == {"color": "blue"}, 30)
        assert took < 10
        # /status lists every source as a single-source document; the web page at / lists them all.
        docs = d.status()["sources"]
        assert sorted(doc["daemon"]["gitsync"]["name"] for doc in docs) == [
            f"{namespace}/{n}" for n in ("after-broken", "app", "broken")
        ]
        code, page = d.get("/")
        assert code == 200 and b"gitsync-app" in page and b"gitsync-broken" in page, page[:500]
        # Printer columns.
        table = kube.kubectl("get", "gitsyncs", "-n", namespace).stdout
        assert table.split("\n")[0].split() == ["NAME", "READY", "REVISION", "DRIFT", "CONFLICTS", "AGE"], table
        # The CLI: get, reconcile (answered in status), suspend, resume.
        listed = json.loads(gs_cli(kube, "get", "-n", namespace, "-o", "json").stdout)
        assert {r["name"]: r["ready"] for r in listed} == {"app": "True", "broken": "False", "after-broken": "False"}
        r = gs_cli(kube, "reconcile", "app", "-n", namespace, "--timeout", "60s")
        assert r.returncode == 0 and "Ready=True" in r.stdout, r.stdout + r.stderr
        assert gs_cli(kube, "suspend", "app", "-n", namespace).returncode == 0
        wait_until("app suspended", lambda: condition(kube, namespace, "app", "Suspended").get("status") == "True", 30)
        kube.kubectl(
            "patch", "configmap", "ok-settings", "-n", namespace, "--type=merge", "-p", '{"data":{"color":"green"}}'
        )
        time.sleep(2)
        assert cm_data(kube, namespace, "ok-settings") == {"color": "green"}  # suspended: left alone
        assert gs_cli(kube, "resume", "app", "-n", namespace).returncode == 0
        wait_until("resumed and corrected", lambda: cm_data(kube, namespace, "ok-settings") == {"color": "blue"}, 30)
        # The broken source gets fixed: its dependent follows.
        broken.commit({"cm.yaml": configmap("fixed", {"a": "1"})})
        assert gs_cli(kube, "reconcile", "broken", "-n", namespace, "--timeout", "60s").returncode == 0
        wait_ready(kube, namespace, "after-broken")
        # Status is written only when it changed: a quiet source costs no status writes.
        writes = [line for line in d.log_lines() if line.get("event") == "cannot write GitSync status"]
        assert not writes


def test_a_tenant_source_is_confined_to_its_service_account(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    other = f"{namespace}-x"[:63]
    kube.kubectl("create", "namespace", other)
    try:
        tenant_and_admin(kube, namespace, other, tmp_path, "theirs", {"a": "1"})
        with Daemon(fleet_args(namespace, tmp_path), kube.env, tmp_path / "fleet.log") as d:
            admin_applied(kube, d, namespace, other)
            wait_until(
                "the tenant's forbidden entry",
                lambda: "forbidden" in gs_status(kube, namespace, "tenant").get("lastError", "").lower(),
                60,
            )
            status = gs_status(kube, namespace, "tenant")
            assert "system:serviceaccount:" + namespace + ":tenant" in status["lastError"], status
            assert status["counts"]["error"] >= 1
            assert cm_data(kube, namespace, "mine") == {"a": "1"}  # what its RBAC allows is applied
            assert cm_data(kube, other, "theirs") is None  # what it does not, is not
            assert condition(kube, namespace, "admin", "Ready")["status"] == "True"
    finally:
        kube.kubectl("delete", "namespace", other, "--wait=false", check=False)


def _held(d: Daemon) -> list[int]:
    try:
        return [s["shard"] for s in d.status()["fleet"]["shards"] if s["held"]]
    except (OSError, AssertionError, KeyError):
        return []


def test_shards_split_work_and_survive_a_killed_replica(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    n = 8
    repos = [GitRepo(tmp_path / f"r{i}", {"cm.yaml": configmap(f"cm{i}", {"v": "1"})}) for i in range(n)]
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input="---\n".join(gitsync(f"s{i}", namespace, repos[i].path, interval="1s") for i in range(n)),
    )
    args = [
        *fleet_args(namespace, tmp_path),
        "--leader-elect",
        "--leader-elect-namespace",
        namespace,
        "--shards",
        "4",
        "--max-shards",
        "2",
        "--lease-duration",
        "4",
        "--renew-deadline",
        "3",
        "--retry-period",
        "0.5",
    ]
    daemons = [Daemon([*args, "--leader-elect-identity", f"r{i}"], kube.env, tmp_path / f"r{i}.log") for i in range(3)]
    try:
        for d in daemons:
            d.wait_ready(60)
        wait_until("all shards held", lambda: sorted(s for d in daemons for s in _held(d)) == [0, 1, 2, 3], 60)
        assert all(len(_held(d)) <= 2 for d in daemons)
        for i in range(n):
            wait_ready(kube, namespace, f"s{i}")
        victim = next(d for d in daemons if _held(d))
        lost = _held(victim)
        victim.kill()
        killed_at = time.monotonic()
        for i in range(n):
            repos[i].commit({"cm.yaml": configmap(f"cm{i}", {"v": "2"})})
        survivors = [d for d in daemons if d is not victim]
        took = wait_until(
            "every source converged after the kill",
            lambda: all(cm_data(kube, namespace, f"cm{i}") == {"v": "2"} for i in range(n)),
            60,
            interval=0.2,
        )
        # Held by the survivors (a replica whose renewal ran late under load may hold a shard back for a
        # renewal period; converged sources do not prove the Leases were all taken at that instant).
        wait_until(
            "the survivors to hold every shard",
            lambda: sorted(s for d in survivors for s in _held(d)) == [0, 1, 2, 3],
            30,
        )
        print(
            f"shards {lost} lost with the killed replica; all {n} sources converged {took:.1f} s after the kill "
            f"({time.monotonic() - killed_at:.1f} s)"
        )
        # No source was reconciled by two replicas at once: per source, the replicas that ran its passes
        # follow each other (A..A then B..B), never interleaved.
        passes: dict[str, list[tuple[str, str]]] = {}
        for d in daemons:
            for line in d.log_lines():
                if line.get("event") == "pass" and line.get("gitsync"):
                    passes.setdefault(line["gitsync"], []).append((line["timestamp"], d.args[-1]))
        assert passes, "no pass logged"
        for ref, seq in passes.items():
            owners = [who for _, who in sorted(seq)]
            runs = [w for k, w in enumerate(owners) if k == 0 or owners[k - 1] != w]
            assert len(runs) == len(set(runs)), f"{ref} passes interleaved between replicas: {runs}"
    finally:
        for d in daemons:
            if d.proc.poll() is None:
                d.stop()


def test_the_fleet_variant_installs_crd_rbac_and_a_sharded_deployment(
    kube: KubeCluster, crd: None, namespace: str
) -> None:
    docs = [
        d for d in yaml.safe_load_all(kube.kubectl("kustomize", str(REPO_ROOT / "deploy/kubernetes/fleet")).stdout) if d
    ]
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Deployment"} <= kinds
    dep = next(d for d in docs if d["kind"] == "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert dep["spec"]["replicas"] == 3 and "--shards=4" in container["args"] and "--leader-elect" in container["args"]
    assert not any(e["name"] == "GITOPS_SYNC_REPO" for e in container.get("env", []))
    rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    impersonating = [r for r in rules if "impersonate" in r["verbs"]]
    assert impersonating == [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]}]
    # The API server takes the ClusterRole and the Deployment as rendered (server-side dry run).
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gitops-sync-fleet")
    role["metadata"]["name"] += f"-{namespace}"
    dep["metadata"]["namespace"] = namespace
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": [role, dep]})
    r = kube.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=test", "-f", "-", input=body)
    assert r.stdout.count("serverside-applied (server dry run)") == 2, r.stdout + r.stderr
    examples = sorted((REPO_ROOT / "examples-repo" / ".gitsyncs").glob("*.yaml"))
    assert len(examples) == 2
    for path in examples:
        doc = yaml.safe_load(path.read_text())
        doc["metadata"]["namespace"] = namespace
        r = kube.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(doc))
        assert "created (server dry run)" in r.stdout, r.stdout + r.stderr
