"""The objects the benchmarks apply, and the out-of-band changes they make.

N objects, a third each of ConfigMaps, headless Services and Deployments, 100 per file (`objs-NNNN.yaml`),
no namespace (both tools get theirs with `-n`). Services are headless because the local cluster's service
CIDR is a /24: 5,000 ClusterIP Services would not fit. Deployments have `replicas: 0`, so the controllers and
the fake node do not run thousands of Pods on the 2 cores the API server and the tools share; each still gets
its ReplicaSet, status updates and a full pod template, which is what both tools send and compare.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.env import BENCH_USER_AGENT, BenchCluster
from gitops_sync.cluster.client import JSON_PATCH, Client
from gitops_sync.errors import ApiError

PER_FILE = 100
DRIFT_MANAGER = "bench-drift"


def manifest(i: int, overrides: dict[int, str] | None = None) -> dict[str, Any]:
    """Object number i: ConfigMap when i % 3 == 0, Service when 1, Deployment when 2."""
    app = f"app-{i}"
    labels = {"app": app, "bench.gitops-sync.io/set": "bench"}
    kind = i % 3
    if kind == 0:
        value = (overrides or {}).get(i, f"value-{i}")
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "labels": labels},
            "data": {"key": value, "settings.yaml": f"replicas: 3\nlogLevel: info\nshard: {i}\n"},
        }
    if kind == 1:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"svc-{i}", "labels": labels},
            "spec": {
                "clusterIP": "None",
                "selector": {"app": app},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
            },
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"deploy-{i}", "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.example/app:1.0",
                            "ports": [{"containerPort": 8080, "name": "http"}],
                            "env": [{"name": "SHARD", "value": str(i)}],
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                        }
                    ],
                },
            },
        },
    }


def write_file(directory: Path, index: int, n: int, overrides: dict[int, str] | None = None) -> Path:
    start = index * PER_FILE
    docs = [manifest(i, overrides) for i in range(start, min(n, start + PER_FILE))]
    path = directory / f"objs-{index:04d}.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def generate(directory: Path, n: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for index in range((n + PER_FILE - 1) // PER_FILE):
        write_file(directory, index, n)
    return directory


def git_init(directory: Path) -> None:
    """Make the generated directory a Git work tree with one commit (the daemon's local-path source)."""

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-C", str(directory), "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args],
            check=True,
            capture_output=True,
        )

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "bench objects")


def git_commit(directory: Path, message: str) -> None:
    subprocess.run(
        [
            "git",
            "-C",
            str(directory),
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@localhost",
            "commit",
            "-q",
            "-am",
            message,
        ],
        check=True,
        capture_output=True,
    )


def head(directory: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


# -- the cluster side --------------------------------------------------------------------------------------


def client(cluster: BenchCluster) -> Client:
    # Tell the bench's own requests apart from gitops-sync's in the audit log.
    return Client(cluster.kubeconfig, pool_size=8, user_agent=BENCH_USER_AGENT)


def create_namespace(c: Client, name: str) -> None:
    c.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def delete_namespaces(cluster: BenchCluster, names: list[str], timeout: float = 600) -> None:
    """Delete and wait: the namespace controller's deletions would otherwise load the next measurement."""
    if not names:
        return
    cluster.run_kubectl(
        "delete",
        "namespace",
        *names,
        "--ignore-not-found",
        f"--timeout={int(timeout)}s",
        check=False,
        timeout=timeout + 30,
    )


@dataclass(frozen=True)
class Drift:
    index: int
    kind: str
    name: str
    path: str  # the collection-relative object path
    patch: list[dict[str, Any]]


def drift_set(n: int, count: int = 10, tag: str = "drifted") -> list[Drift]:
    """`count` objects spread over the set and the three kinds, each with one field changed out of band."""
    out: list[Drift] = []
    step = max(1, n // count)
    for k in range(count):
        i = min(n - 1, k * step + (k % 3))  # k % 3 walks the kinds: ConfigMap, Service, Deployment
        out.append(drift_for(i, f"{tag}-{k}"))
    return out


def drift_for(i: int, value: str) -> Drift:
    kind = i % 3
    if kind == 0:
        return Drift(
            i, "ConfigMap", f"cm-{i}", f"configmaps/cm-{i}", [{"op": "replace", "path": "/data/key", "value": value}]
        )
    if kind == 1:
        return Drift(
            i,
            "Service",
            f"svc-{i}",
            f"services/svc-{i}",
            [{"op": "replace", "path": "/spec/ports/0/targetPort", "value": 9000 + len(value)}],
        )
    return Drift(
        i,
        "Deployment",
        f"deploy-{i}",
        f"deployments/deploy-{i}",
        [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": f"registry.example/app:{value}"}],
    )


def object_path(namespace: str, d: Drift) -> str:
    base = "/apis/apps/v1" if d.kind == "Deployment" else "/api/v1"
    return f"{base}/namespaces/{namespace}/{d.path}"


def apply_drift(c: Client, namespace: str, d: Drift) -> None:
    """A JSON patch under another field manager, as `kubectl edit` or a controller would make it."""
    try:
        c.request(
            "PATCH",
            object_path(namespace, d),
            query={"fieldManager": DRIFT_MANAGER},
            body=d.patch,
            content_type=JSON_PATCH,
        )
    except ApiError as exc:
        raise RuntimeError(f"out-of-band change of {d.kind} {namespace}/{d.name} failed: {exc}") from exc
