"""Fleet benchmark: many GitSync sources in one controller, and one controller vs one daemon per source.

    .venv/bin/python -m bench.fleet                      # a private local control plane (started, stopped)
    .venv/bin/python -m bench.fleet --kubeconfig PATH    # reuse a running one
    .venv/bin/python -m bench.fleet --sources 20 --objects 10 --pairs 5   # small

Case F1: `--sources` GitSyncs of `--objects` ConfigMaps each (plain directories), one fleet controller
(`gitops-sync run` without --repo): seconds until every GitSync is Ready, peak RSS (VmHWM), API requests per
minute while nothing changes (the controller's own request counters, /status `fleet.requests`), and drift
(a ConfigMap value changed under another field manager) -> corrected, p50/p95 over 20 drifts.
Case F2: `--pairs` sources as `--pairs` single-source daemons (`run --repo`) vs one fleet controller with
`--pairs` GitSyncs, same objects: total RSS once all are ready, and API requests (start-up to ready, then one
idle minute). Prints a Markdown table (BENCHMARKS.md keeps it in its hand-written section).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.daemon import DaemonProcess, percentile
from bench.env import BenchCluster, log
from gitops_sync.cluster.client import Client
from gitops_sync.log import configure as configure_logging

REPO_ROOT = Path(__file__).resolve().parents[1]
CRD = REPO_ROOT / "deploy" / "kubernetes" / "crd" / "gitsyncs.gitops-sync.io.yaml"
GS = [sys.executable, "-m", "gitops_sync"]
MB = 1_000_000
IDLE = 60.0  # seconds of the idle window (--idle)


def write_source(directory: Path, tag: str, n: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    docs = [
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{tag}-cm{i}"},
                "data": {"value": f"{tag}-{i}", "pad": "x" * 200},
            }
        )
        for i in range(n)
    ]
    (directory / "objects.yaml").write_text("\n---\n".join(docs) + "\n")


def gitsync(name: str, namespace: str, repo: Path) -> dict[str, Any]:
    return {
        "apiVersion": "gitops-sync.io/v1alpha1",
        "kind": "GitSync",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"repository": str(repo), "interval": "1m"},
    }


def vm(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def requests_of(d: DaemonProcess) -> int:
    """Client-side requests the process sent (reads incl. watch opens, writes, dry runs)."""
    doc = d.status()
    counts = (doc.get("fleet") or doc.get("daemon") or {}).get("requests") or {}
    return int(counts.get("reads", 0)) + int(counts.get("writes", 0)) + int(counts.get("dryRuns", 0))


def ready_count(c: Client, namespace: str) -> int:
    items = c.request("GET", f"/apis/gitops-sync.io/v1alpha1/namespaces/{namespace}/gitsyncs").get("items") or []
    return sum(
        1
        for o in items
        if any(
            cond.get("type") == "Ready" and cond.get("status") == "True"
            for cond in (o.get("status") or {}).get("conditions") or []
        )
    )


def wait_for(what: str, check: Any, timeout: float, interval: float = 0.5) -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"bench.fleet: timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - t0


def make_namespace(c: Client, name: str) -> None:
    c.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def create_gitsyncs(c: Client, namespace: str, roots: list[Path]) -> None:
    for i, root in enumerate(roots):
        c.request(
            "POST",
            f"/apis/gitops-sync.io/v1alpha1/namespaces/{namespace}/gitsyncs",
            body=gitsync(f"s{i:03d}", namespace, root),
        )


def fleet_daemon(cluster: BenchCluster, namespace: str, work: Path, name: str, workers: int) -> DaemonProcess:
    return DaemonProcess(
        [*GS, "run", "--watch-namespace", namespace, "--workers", str(workers), "--allow-local-repository", str(work)],
        cluster.env,
        work / f"{name}.log",
    )


def case_f1(cluster: BenchCluster, c: Client, work: Path, sources: int, objects: int, workers: int) -> dict[str, Any]:
    ns = f"fleet-{uuid.uuid4().hex[:6]}"
    make_namespace(c, ns)
    roots = [work / "f1" / f"s{i:03d}" for i in range(sources)]
    for i, root in enumerate(roots):
        write_source(root, f"s{i:03d}", objects)
    create_gitsyncs(c, ns, roots)
    d = fleet_daemon(cluster, ns, work, "f1", workers)
    try:
        took = wait_for(f"{sources} GitSyncs Ready", lambda: ready_count(c, ns) == sources, 1800, interval=1.0)
        log(f"F1: {sources} x {objects}: all Ready in {took:.1f} s")
        time.sleep(10)  # let the last status writes and Events drain
        before, t_idle = requests_of(d), time.monotonic()
        time.sleep(IDLE)
        idle = (requests_of(d) - before) / ((time.monotonic() - t_idle) / 60)
        log(f"F1: idle API requests per minute: {idle:.0f}")
        lat: list[float] = []
        for k in range(20):
            i = (k * 37) % sources
            name = f"s{i:03d}-cm{k % objects}"
            path = f"/api/v1/namespaces/{ns}/configmaps/{name}"
            c.request(
                "PATCH",
                path,
                body={"data": {"value": "drifted"}},
                query={"fieldManager": "bench-drift"},
                content_type="application/merge-patch+json",
            )
            t = time.monotonic()
            want = f"s{i:03d}-{k % objects}"
            wait_for("drift corrected", lambda p=path, w=want: c.request("GET", p)["data"]["value"] == w, 30, 0.01)
            lat.append(time.monotonic() - t)
        rss = vm(d.proc.pid, "VmHWM")
    finally:
        d.stop()
    return {
        "sources": sources,
        "objects": objects,
        "ready_s": round(took, 1),
        "peak_rss": rss,
        "idle_rpm": round(idle, 1),
        "drift_p50": percentile(lat, 50),
        "drift_p95": percentile(lat, 95),
        "drifts": len(lat),
    }


def case_f2(cluster: BenchCluster, c: Client, work: Path, pairs: int, objects: int, workers: int) -> dict[str, Any]:
    out: dict[str, Any] = {"pairs": pairs, "objects": objects}
    # (a) one single-source daemon per source
    ns_a = f"single-{uuid.uuid4().hex[:6]}"
    make_namespace(c, ns_a)
    roots = [work / "f2a" / f"p{i:02d}" for i in range(pairs)]
    for i, root in enumerate(roots):
        write_source(root, f"p{i:02d}", objects)
    daemons = [
        DaemonProcess(
            [*GS, "run", "--repo", str(r), "-n", ns_a, "--name", f"p{i:02d}"], cluster.env, work / f"single{i}.log"
        )
        for i, r in enumerate(roots)
    ]
    try:
        t0 = time.monotonic()
        for d in daemons:
            if d.wait_ready(600) is None:
                raise SystemExit("bench.fleet: a single-source daemon did not get ready")
        out["single_ready_s"] = round(time.monotonic() - t0, 1)
        time.sleep(10)
        out["single_rss"] = sum(vm(d.proc.pid, "VmRSS") for d in daemons)
        out["single_peak"] = sum(vm(d.proc.pid, "VmHWM") for d in daemons)
        start = sum(requests_of(d) for d in daemons)
        time.sleep(IDLE)
        out["single_start_requests"] = start
        out["single_idle_rpm"] = round((sum(requests_of(d) for d in daemons) - start) * 60 / IDLE)
    finally:
        for d in daemons:
            d.stop()
    # (b) one fleet controller with the same sources
    ns_b = f"fleet2-{uuid.uuid4().hex[:6]}"
    make_namespace(c, ns_b)
    roots_b = [work / "f2b" / f"p{i:02d}" for i in range(pairs)]
    for i, root in enumerate(roots_b):
        write_source(root, f"p{i:02d}", objects)
    create_gitsyncs(c, ns_b, roots_b)
    d = fleet_daemon(cluster, ns_b, work, "f2b", workers)
    try:
        t0 = time.monotonic()
        wait_for("the fleet's sources Ready", lambda: ready_count(c, ns_b) == pairs, 600)
        out["fleet_ready_s"] = round(time.monotonic() - t0, 1)
        time.sleep(10)
        out["fleet_rss"] = vm(d.proc.pid, "VmRSS")
        out["fleet_peak"] = vm(d.proc.pid, "VmHWM")
        start = requests_of(d)
        time.sleep(IDLE)
        out["fleet_start_requests"] = start
        out["fleet_idle_rpm"] = round((requests_of(d) - start) * 60 / IDLE)
    finally:
        d.stop()
    return out


def markdown(f1: dict[str, Any] | None, f2: dict[str, Any] | None) -> str:
    lines = ["| case | measure | value | target |", "|---|---|---|---|"]
    if f1:
        n = f"{f1['sources']} sources x {f1['objects']} ConfigMaps"
        lines += [
            f"| F1 {n} | time until every GitSync Ready | {f1['ready_s']} s | - |",
            f"| F1 {n} | controller peak RSS (VmHWM) | {f1['peak_rss'] / MB:.0f} MB | ≤ 300 MB |",
            f"| F1 {n} | API requests per minute, idle | {f1['idle_rpm']:.0f} | - |",
            f"| F1 {n} | drift → corrected ({f1['drifts']} drifts) | p50 {f1['drift_p50']:.2f} s / "
            f"p95 {f1['drift_p95']:.2f} s | p95 ≤ 1 s |",
        ]
    if f2:
        p = f2["pairs"]
        lines += [
            f"| F2 {p} x {f2['objects']} objects | total RSS when ready: {p} daemons vs 1 fleet | "
            f"{f2['single_rss'] / MB:.0f} MB vs {f2['fleet_rss'] / MB:.0f} MB (peaks {f2['single_peak'] / MB:.0f} vs "
            f"{f2['fleet_peak'] / MB:.0f}) | - |",
            f"| F2 | API requests, start until ready | {f2['single_start_requests']} vs "
            f"{f2['fleet_start_requests']} | - |",
            f"| F2 | API requests in one idle minute | {f2['single_idle_rpm']} vs {f2['fleet_idle_rpm']} | - |",
            f"| F2 | seconds until all ready | {f2['single_ready_s']} vs {f2['fleet_ready_s']} | - |",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", type=Path, default=None, help="reuse this cluster (default: start one)")
    p.add_argument("--sources", type=int, default=200)
    p.add_argument("--objects", type=int, default=50)
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--cases", default="1,2")
    p.add_argument("--idle", type=float, default=60.0, help="seconds of each idle window (requests per minute)")
    args = p.parse_args(argv)
    global IDLE
    IDLE = args.idle
    configure_logging("auto", "warning")
    cases = {int(x) for x in args.cases.split(",") if x.strip()}
    cluster = BenchCluster.reuse(args.kubeconfig) if args.kubeconfig else BenchCluster.start(None)
    started = time.time()
    try:
        cluster.run_kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        cluster.run_kubectl("wait", "--for=condition=Established", "crd/gitsyncs.gitops-sync.io", "--timeout=60s")
        with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp, Client(cluster.kubeconfig, pool_size=8) as c:
            work = Path(tmp)
            f1 = case_f1(cluster, c, work, args.sources, args.objects, args.workers) if 1 in cases else None
            f2 = case_f2(cluster, c, work, args.pairs, args.objects, args.workers) if 2 in cases else None
    finally:
        cluster.stop()
    print(
        f"<!-- bench.fleet {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, "
        f"{(time.time() - started) / 60:.1f} min; raw: {json.dumps({'f1': f1, 'f2': f2})} -->"
    )
    print(markdown(f1, f2))
    return 0 if not (f1 and not math.isnan(f1["drift_p95"])) or f1["drift_p95"] <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
