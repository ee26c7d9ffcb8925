"""The floor of cases 1 and 2: what the API server itself needs, measured instead of argued.

Cold: the same N server-side applies gitops-sync sends, from a minimal client (urllib3 through the bench's
Client, bodies encoded before the clock starts, no rendering, no planning, no inventory) at the same
concurrency, into a namespace of its own. No-op: the reads a no-op sync cannot avoid, a LIST per kind
(page by page, decoded). Wall time of the requests only, in this process (no process start-up). The table
then shows gitops-sync ÷ floor (bench/report.py).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from bench.env import BenchCluster, settle
from gitops_sync import jsoncodec
from gitops_sync.cluster.client import APPLY_PATCH, Client, object_path

FLOOR = "floor"
FLOOR_USER_AGENT = "gitops-sync-bench-floor"
_SELECTOR = "bench.gitops-sync.io/set=bench"  # the workload's objects (not the namespace's kube-root-ca.crt)
# The kinds bench/workload.py writes: (apiVersion, kind) -> (URL base, plural)
_KINDS = {
    ("v1", "ConfigMap"): ("/api/v1", "configmaps"),
    ("v1", "Service"): ("/api/v1", "services"),
    ("apps/v1", "Deployment"): ("/apis/apps/v1", "deployments"),
}


def _bodies(directory: Path, namespace: str) -> list[tuple[str, bytes]]:
    out = []
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            base, plural = _KINDS[(doc["apiVersion"], doc["kind"])]
            doc["metadata"]["namespace"] = namespace
            out.append((object_path(base, namespace, plural, doc["metadata"]["name"]), jsoncodec.dumps(doc)))
    return out


def cold_floor(cluster: BenchCluster, directory: Path, namespace: str, concurrency: int) -> dict[str, Any]:
    """Seconds for N applies at `concurrency` (and how many failed)."""
    bodies = _bodies(directory, namespace)
    query: dict[str, str | bool] = {"fieldManager": "bench-floor", "force": True}
    with Client(cluster.kubeconfig, pool_size=concurrency, user_agent=FLOOR_USER_AGENT) as c:
        c.get("/version")  # the connection pool's TLS handshake, before the clock

        def one(item: tuple[str, bytes]) -> bool:
            try:
                c.request("PATCH", item[0], query=query, body=item[1], content_type=APPLY_PATCH)
            except Exception:
                return False
            return True

        settle(cluster)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            done = list(pool.map(one, bodies))
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, "objects": len(bodies), "failed": done.count(False)}


def noop_floor(cluster: BenchCluster, namespace: str) -> dict[str, Any]:
    """Seconds to LIST (and decode) every kind of the workload in `namespace`, the kinds in parallel."""
    with Client(cluster.kubeconfig, pool_size=4, user_agent=FLOOR_USER_AGENT) as c:
        c.get("/version")
        settle(cluster)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(_KINDS)) as pool:  # gitops-sync lists the kinds in parallel too
            listed = pool.map(
                lambda bp: len(c.list_collection(object_path(bp[0], namespace, bp[1]), label_selector=_SELECTOR).items),
                _KINDS.values(),
            )
            items = sum(listed)
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, "objects": items, "failed": 0}
