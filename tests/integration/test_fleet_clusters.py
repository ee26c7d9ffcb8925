"""GitSyncs that target another cluster (`spec.kubeConfig.secretRef`), on two real control planes.

`second_kube` (this session's own) runs the fleet controller and holds the CRD, the GitSyncs and the
kubeconfig Secrets: the shared cluster's CRD is re-applied by other branches' tests at any time, and one
without spec.kubeConfig would make the API server prune it. The target is `kube`, reached through a TCP
relay process of this test, the fault: the relay frozen (SIGSTOP) keeps its sockets and answers nothing, which
is a hung API server as the controller sees it, without stopping the shared cluster. One controller: a
GitSync of the target cluster converges there (not on the controller's), the same repository synced to both
keeps two inventories apart, a tenant cannot use someone else's kubeconfig Secret, a kubeconfig with an exec
plugin is refused, and the target frozen marks only its GitSync ClusterUnreachable while drift on the
controller's cluster is still corrected; it recovers by itself after SIGCONT.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_until
from tests.integration.test_fleet import CRD, cm_data, condition, fleet_args, gitsync, tenant_account, wait_ready

CLUSTER_ID = "gitops-sync.io/cluster-id"


def _secret(name: str, namespace: str, kubeconfig: bytes) -> str:
    data = {"value": base64.b64encode(kubeconfig).decode()}
    doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "data": data}
    return json.dumps(doc) + "\n"


def _exec_kubeconfig(admin: Path) -> bytes:
    """The admin kubeconfig with its user swapped for an exec plugin (which must never run)."""
    doc: dict[str, Any] = yaml.safe_load(admin.read_text())
    for u in doc["users"]:
        u["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/touch"}}
    return yaml.safe_dump(doc).encode()


RELAY = r"""
import socket, sys, threading
listen = socket.create_server(("127.0.0.1", 0))
print(listen.getsockname()[1], flush=True)
host, port = sys.argv[1], int(sys.argv[2])
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
while True:
    client, _ = listen.accept()
    upstream = socket.create_connection((host, port))
    threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
"""


@contextmanager
def relayed(kubeconfig: Path) -> Iterator[tuple[bytes, subprocess.Popen[str]]]:
    """`kubeconfig` re-pointed at a TCP relay process to its API server (same certificates, another port)."""
    doc: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    server = doc["clusters"][0]["cluster"]["server"]
    host, port = server.split("://", 1)[1].split("/")[0].rsplit(":", 1)
    proc = subprocess.Popen([sys.executable, "-c", RELAY, host, port], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        local = int(proc.stdout.readline())
        for c in doc["clusters"]:
            c["cluster"]["server"] = f"https://{host}:{local}"
        yield yaml.safe_dump(doc).encode(), proc
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def reader_may_read_the_secret(home: KubeCluster, ns: str) -> None:
    """ServiceAccount `reader` on the controller's cluster: it may get Secret `target` (its kubeconfig), no more."""
    home.kubectl("create", "serviceaccount", "reader", "-n", ns)
    home.kubectl("create", "role", "reader", "-n", ns, "--verb=get", "--resource=secrets", "--resource-name=target")
    home.kubectl("create", "rolebinding", "reader", "-n", ns, "--role=reader", f"--serviceaccount={ns}:reader")


def target_tenant(target: KubeCluster, ns: str) -> None:
    """On the target cluster, ServiceAccount `reader` may do anything with ConfigMaps of `ns` and nothing else."""
    target.kubectl("create", "serviceaccount", "reader", "-n", ns)
    target.kubectl(
        "create",
        "role",
        "reader",
        "-n",
        ns,
        "--verb=get,list,watch,create,update,patch,delete",
        "--resource=configmaps",
    )
    target.kubectl("create", "rolebinding", "reader", "-n", ns, "--role=reader", f"--serviceaccount={ns}:reader")


def crd_now(kube: KubeCluster) -> None:
    """This branch's CRD, applied again now; spec.kubeConfig must be in the served schema (else the API
    server prunes it and the GitSyncs would target the controller's cluster)."""
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    crd_doc = kube.get("crd", "gitsyncs.gitops-sync.io")
    props = crd_doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert "kubeConfig" in props


def _ready(kube: KubeCluster, ns: str, name: str) -> dict[str, Any]:
    return condition(kube, ns, name, "Ready")


def _drift_corrected(kube: KubeCluster, ns: str, name: str) -> float:
    """Seconds from a hand edit (kubectl started) of ConfigMap `name` on `kube` until the fleet put Git's value
    back (one edit per object: edits repeated by one manager are a fight the controller yields to)."""
    started = time.monotonic()  # kubectl's own start counts: the fleet may correct before kubectl exits
    kube.kubectl("patch", "configmap", name, "-n", ns, "--type=merge", "-p", json.dumps({"data": {"v": "hand"}}))
    wait_until("drift corrected", lambda: cm_data(kube, ns, name) == {"v": "1"}, 60, interval=0.05)
    return time.monotonic() - started


def test_gitsyncs_of_two_clusters_converge_apart_and_a_frozen_one_blocks_only_its_own(
    kube: KubeCluster, second_kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    ns, home, target = namespace, second_kube, kube  # `namespace` exists on the target; made on home here
    crd_now(home)
    home.kubectl("create", "namespace", ns, check=False)
    tenant_account(home, ns)  # ConfigMaps of ns only: not Secrets
    theirs = f"theirs-{ns[-6:]}"
    tenant_repo = GitRepo(
        tmp_path / "tenant",
        {"mine.yaml": configmap("mine", {"t": "1"}), "theirs.yaml": configmap(theirs, {"t": "1"}, namespace="default")},
    )
    reader_may_read_the_secret(home, ns)
    target_tenant(target, ns)  # on the target: ConfigMaps of ns only, as the impersonated ServiceAccount
    repo = GitRepo(tmp_path / "app", {f"{n}.yaml": configmap(n, {"v": "1"}) for n in ("app", "before", "during")})
    with relayed(target.kubeconfig) as (target_bytes, relay):
        home.kubectl(
            "apply",
            "-f",
            "-",
            input="---\n".join(
                [
                    _secret("target", ns, target_bytes),
                    _secret("exec", ns, _exec_kubeconfig(target.kubeconfig)),
                    gitsync(
                        "remote", ns, repo.path, prune=True, interval="2s", kubeConfig={"secretRef": {"name": "target"}}
                    ),
                    gitsync("local", ns, repo.path, prune=True, interval="2s"),
                    gitsync(
                        "thief",
                        ns,
                        repo.path,
                        serviceAccountName="tenant",
                        kubeConfig={"secretRef": {"name": "target"}},
                    ),
                    gitsync("runner", ns, repo.path, kubeConfig={"secretRef": {"name": "exec"}}),
                    gitsync(
                        "tenant",
                        ns,
                        tenant_repo.path,
                        serviceAccountName="reader",
                        interval="2s",
                        kubeConfig={"secretRef": {"name": "target"}},
                    ),
                ]
            ),
        )
        with Daemon(fleet_args(ns, tmp_path), home.env, tmp_path / "fleet.log") as d:
            d.wait_ready(60)
            wait_ready(home, ns, "local")
            wait_ready(home, ns, "remote")
            uid_home = home.get("namespace", "kube-system")["metadata"]["uid"]
            uid_target = target.get("namespace", "kube-system")["metadata"]["uid"]
            # Each cluster holds the objects and only the inventory of the GitSync that targets it.
            wait_until("app on the target cluster", lambda: cm_data(target, ns, "app") == {"v": "1"}, 30)
            assert cm_data(home, ns, "app") == {"v": "1"}
            parents_t = {
                c["metadata"]["name"]: c for c in target.list("configmaps", ns) if "gitsync-" in c["metadata"]["name"]
            }
            parents_h = {
                c["metadata"]["name"]: c for c in home.list("configmaps", ns) if "gitsync-" in c["metadata"]["name"]
            }
            assert [n for n in parents_t if "remote" in n] and not [n for n in parents_t if "local" in n], list(
                parents_t
            )
            assert [n for n in parents_h if "local" in n] and not [n for n in parents_h if "remote" in n], list(
                parents_h
            )
            assert {p["metadata"]["annotations"].get(CLUSTER_ID) for p in parents_t.values()} == {uid_target}
            # The controller's own cluster's parents record it, or (as before issue 26) nothing; never the target.
            assert {p["metadata"]["annotations"].get(CLUSTER_ID) for p in parents_h.values()} <= {uid_home, None}
            status = home.get("gitsync", "remote", ns)["status"]
            assert uid_target in status["cluster"] and "cluster" not in home.get("gitsync", "local", ns)["status"]
            # A tenant may not read the Secret: refused, naming the Secret, never its content.
            wait_until("thief refused", lambda: _ready(home, ns, "thief").get("reason") == "KubeConfigForbidden", 30)
            msg = _ready(home, ns, "thief")["message"]
            assert f"Secret {ns}/target" in msg and f"system:serviceaccount:{ns}:tenant" in msg, msg
            user = yaml.safe_load(target_bytes)["users"][0]["user"]
            secret_values = [str(v)[-40:] for v in user.values() if isinstance(v, str) and len(v) > 20]
            assert secret_values
            # An exec plugin in the kubeconfig: refused, naming the key; the command never ran.
            wait_until("runner refused", lambda: _ready(home, ns, "runner").get("reason") == "KubeConfigRefused", 30)
            assert "user.exec" in _ready(home, ns, "runner")["message"]
            # A tenant allowed its Secret: its objects are written on the target as its ServiceAccount there.
            wait_until("the tenant's ConfigMap on the target", lambda: cm_data(target, ns, "mine") == {"t": "1"}, 60)
            wait_until(
                "the tenant's forbidden write", lambda: "forbidden" in _ready(home, ns, "tenant").get("message", ""), 30
            )
            assert cm_data(target, "default", theirs) is None and cm_data(home, ns, "mine") is None
            assert f"system:serviceaccount:{ns}:reader" in _ready(home, ns, "tenant")["message"]
            doc = json.dumps(d.status())
            assert uid_target in doc and '"clusters"' in doc
            code, page = d.get("/")
            assert code == 200 and status["cluster"] in page.decode()  # the page names the target cluster
            for place in (doc, json.dumps(home.get("gitsync", "thief", ns)), (tmp_path / "fleet.log").read_text()):
                for v in secret_values:
                    assert v not in place
            assert (
                d.metric("gitops_sync_gitsync_cluster_reachable", source=f"{ns}/remote", cluster=status["cluster"]) == 1
            )

            listed = subprocess.run(
                [sys.executable, "-m", "gitops_sync", "get", "-A", "--kubeconfig", str(home.kubeconfig)],
                env=home.env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
            lines = {line.split()[1]: line for line in listed.splitlines()[1:] if line.split()[0] == ns}
            assert "CLUSTER" in listed.splitlines()[0] and status["cluster"] in lines["remote"], listed
            assert "in-cluster" in lines["local"], listed
            # A drift on the target is seen by its own watch cache and corrected there (not on home).
            on_target = _drift_corrected(target, ns, "app")
            assert on_target < 30, on_target
            before = [_drift_corrected(home, ns, "before")]
            os.kill(relay.pid, signal.SIGSTOP)  # the target hangs: connections accepted, nothing answered
            try:
                t0 = time.monotonic()
                wait_until(
                    "remote ClusterUnreachable",
                    lambda: _ready(home, ns, "remote").get("reason") == "ClusterUnreachable",
                    60,
                    interval=0.2,
                )
                unreachable_after = time.monotonic() - t0
                assert status["cluster"].split("#")[0] in _ready(home, ns, "remote")["message"]
                during = [_drift_corrected(home, ns, "during")]
                assert _ready(home, ns, "local")["status"] == "True"
                assert (
                    d.metric("gitops_sync_gitsync_cluster_reachable", source=f"{ns}/remote", cluster=status["cluster"])
                    == 0
                )
            finally:
                os.kill(relay.pid, signal.SIGCONT)
            t1 = time.monotonic()
            wait_until("remote recovered", lambda: _ready(home, ns, "remote").get("status") == "True", 90, interval=0.2)
            recovered_after = time.monotonic() - t1
            print(
                f"drift on the target corrected in {on_target:.2f} s; "
                f"drift corrected before {[round(x, 2) for x in before]} s, with the target cluster frozen "
                f"{[round(x, 2) for x in during]} s; ClusterUnreachable after {unreachable_after:.1f} s; "
                f"Ready again {recovered_after:.1f} s after SIGCONT"
            )
            assert max(during) < max(before) * 2 + 2.0, (before, during)
            assert cm_data(target, ns, "during") == {"v": "1"}  # the target untouched by home's drift
            # The Secret rotated (the target's own URL, no relay): the next poll reconnects; the old
            # connection is closed once nobody uses it.
            direct = target.kubeconfig.read_bytes()
            direct_server = yaml.safe_load(direct)["clusters"][0]["cluster"]["server"].rstrip("/")
            home.kubectl("apply", "-f", "-", input=_secret("target", ns, direct))
            wait_until(
                "reconnected after the rotation",
                lambda: (
                    (home.get("gitsync", "remote", ns).get("status") or {}).get("cluster", "").startswith(direct_server)
                ),
                60,
                interval=0.2,
            )
            # The tenant's GitSync names the same Secret: at its own next poll it moves too, and the old
            # connection, used by nobody, is closed.
            wait_until(
                "one connection, the new one",
                lambda: [c["server"] for c in d.status()["fleet"]["clusters"]] == [direct_server],
                30,
                interval=0.2,
            )
            wait_ready(home, ns, "remote")
    home.kubectl("delete", "namespace", ns, "--wait=false", check=False)
