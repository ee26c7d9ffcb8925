"""Many clusters: one fleet controller, 2 clusters x N GitSyncs against 1 cluster x 2N (issue 26).

    .venv/bin/python -m bench.fleet_clusters                       # 100 GitSyncs per cluster x 20 ConfigMaps
    .venv/bin/python -m bench.fleet_clusters --per-cluster 20      # smaller (a shared machine)

Two private local control planes are started (and stopped): `home`, where the controller runs and its
GitSyncs live, and `remote`. Case one: 2N GitSyncs, every one on home. Case two: N on home and N on remote
(`spec.kubeConfig.secretRef`, one Secret holding remote's admin kubeconfig: one connection and watch cache
shared by the N). Each case with a fresh controller and namespace: seconds from the controller's start until
every GitSync is Ready, and its peak RSS (VmHWM). One run each; printed side by side as a Markdown table.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.env import BenchCluster, log
from bench.fleet import CRD, MB, fleet_daemon, gitsync, make_namespace, ready_count, vm, wait_for, write_source
from gitops_sync.cluster.client import Client
from gitops_sync.log import configure as configure_logging


def _secret(namespace: str, kubeconfig: Path) -> dict[str, Any]:
    data = {"value": base64.b64encode(kubeconfig.read_bytes()).decode()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "remote", "namespace": namespace}, "data": data}


def run_case(
    home: BenchCluster, c: Client, remote: tuple[BenchCluster, Client] | None, work: Path, n: int, objects: int
) -> dict[str, Any]:
    """`n` GitSyncs on home and `n` more: on remote when given, else on home too."""
    label = "two" if remote else "one"
    ns = f"clusters-{label}-{uuid.uuid4().hex[:6]}"
    make_namespace(c, ns)
    docs = []
    for i in range(2 * n):
        root = work / label / f"s{i:03d}"
        write_source(root, f"s{i:03d}", objects)
        doc = gitsync(f"s{i:03d}", ns, root)
        if remote and i >= n:
            doc["spec"]["kubeConfig"] = {"secretRef": {"name": "remote"}}
        docs.append(doc)
    if remote:
        make_namespace(remote[1], ns)  # the inventories of its GitSyncs live there, in the same namespace
        c.request("POST", f"/api/v1/namespaces/{ns}/secrets", body=_secret(ns, remote[0].kubeconfig))
    for doc in docs:
        c.request("POST", f"/apis/gitops-sync.io/v1alpha1/namespaces/{ns}/gitsyncs", body=doc)
    t0 = time.monotonic()
    d = fleet_daemon(home, ns, work, f"fleet-{label}", workers=4)
    try:
        wait_for(f"{2 * n} GitSyncs Ready", lambda: ready_count(c, ns) == 2 * n, 3600, interval=1.0)
        took = time.monotonic() - t0
        rss = vm(d.proc.pid, "VmHWM")
    finally:
        d.stop()
    log(f"{label} cluster(s): {2 * n} GitSyncs x {objects} Ready in {took:.1f} s, peak RSS {rss / MB:.0f} MB")
    return {"clusters": 2 if remote else 1, "gitsyncs": 2 * n, "objects": objects, "ready_s": took, "peak_rss": rss}


def markdown(one: dict[str, Any], two: dict[str, Any], n: int) -> str:
    o = one["objects"]
    return "\n".join(
        [
            f"| measure | 1 cluster x {2 * n} GitSyncs | 2 clusters x {n} GitSyncs | ratio |",
            "|---|---|---|---|",
            f"| all Ready after start ({o} ConfigMaps each) | {one['ready_s']:.1f} s | {two['ready_s']:.1f} s | "
            f"{two['ready_s'] / one['ready_s']:.2f}x |",
            f"| controller peak RSS (VmHWM) | {one['peak_rss'] / MB:.0f} MB | {two['peak_rss'] / MB:.0f} MB | "
            f"{two['peak_rss'] / one['peak_rss']:.2f}x |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-cluster", type=int, default=100, help="GitSyncs per cluster in the two-cluster case")
    p.add_argument("--objects", type=int, default=20, help="ConfigMaps per GitSync")
    args = p.parse_args(argv)
    configure_logging("auto", "warning")
    started = time.time()
    home = BenchCluster.start(None)
    remote: BenchCluster | None = None
    try:
        remote = BenchCluster.start(None)
        home.run_kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        home.run_kubectl("wait", "--for=condition=Established", "crd/gitsyncs.gitops-sync.io", "--timeout=60s")
        with (
            tempfile.TemporaryDirectory(prefix="bench-clusters-") as tmp,
            Client(home.kubeconfig, pool_size=8) as c,
            Client(remote.kubeconfig, pool_size=4) as rc,
        ):
            one = run_case(home, c, None, Path(tmp), args.per_cluster, args.objects)
            two = run_case(home, c, (remote, rc), Path(tmp), args.per_cluster, args.objects)
    finally:
        if remote is not None:
            remote.stop()
        home.stop()
    raw = json.dumps({"one": one, "two": two})
    print(f"<!-- bench.fleet_clusters {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}; raw: {raw} -->")
    print(markdown(one, two, args.per_cluster))
    return 0


if __name__ == "__main__":
    sys.exit(main())
