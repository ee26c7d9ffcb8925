"""The fleet side by side with Flux's own controllers, on the same workload in one run: `make bench-fleet`.

    .venv/bin/python -m bench.fleet_flux                            # (100, 10); writes BENCHMARKS-fleet.md
    .venv/bin/python -m bench.fleet_flux --sizes 100x10,1000x4      # several sizes, one cluster
    .venv/bin/python -m bench.fleet_flux --sizes 5x2 --idle 10 --drifts 3 --commits 2 --output /tmp/x.md

Starts a private control plane (deploy/local-cluster, `--auto-ports`; never a shared one) and a Git server
on loopback (bench/gitserver.py: smart HTTP, one bare repository per source, M ConfigMaps each). For each
size, gitops-sync's fleet controller (`gitops-sync run`, GitSyncs) and then Flux (source-controller +
kustomize-controller, GitRepository + Kustomization per source; bench/flux.py) each get a fresh namespace
and the same repositories, and the bench measures: sources created → all Ready; peak memory (PSS summed over
the tool's processes and their children, sampled at 4 Hz from /proc); CPU seconds (/proc stat, children
included); API reads and writes (the audit log, by user agent); requests per minute while nothing changes;
drift → corrected (a ConfigMap value changed under another field manager, D sources at once, seen on a
watch); a new commit → applied (K repositories at once). Flux is measured at the Flux CLI's default interval
(1m) and again at its shortest sensible one (10s). Prints a table with ratios and PASS/MISS against issue
28's targets, and rewrites that size's section of BENCHMARKS-fleet.md (bench/fleet_report.py).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import fleet_report, flux
from bench.daemon import DaemonProcess, percentile
from bench.env import BENCH_USER_AGENT, REPO, AuditCounter, BenchCluster, log, machine, versions
from bench.gitserver import GitHTTPServer
from gitops_sync.cluster.client import Client
from gitops_sync.log import configure as configure_logging

CRD = REPO / "deploy" / "kubernetes" / "crd" / "gitsyncs.gitops-sync.io.yaml"
GS = [sys.executable, "-m", "gitops_sync"]
GS_AGENT = "gitops-sync/"  # the daemon's user agent (the bench's own is gitops-sync-bench)
DEFAULT_INTERVAL = "1m"  # GitSync's default, and the Flux CLI's default for both kinds
SHORT_INTERVAL = "10s"
DRIFT_MANAGER = "bench-drift"


# -- the repositories ------------------------------------------------------------------------------------


def manifest(tag: str, m: int, values: dict[int, str]) -> bytes:
    docs = [
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{tag}-cm{i}"},
                "data": {"value": values.get(i, f"{tag}-{i}"), "pad": "x" * 200},
            }
        )
        for i in range(m)
    ]
    return ("\n---\n".join(docs) + "\n").encode()


def fast_import(repo: Path, content: bytes, message: str, parent: bool) -> None:
    """One commit of objects.yaml on main, written straight into the bare repository (no work tree)."""
    msg = message.encode()
    stream = b"commit refs/heads/main\ncommitter bench <bench@localhost> %d +0000\n" % int(time.time())
    stream += b"data %d\n%s\n" % (len(msg), msg)
    if parent:
        stream += b"from refs/heads/main^0\n"
    stream += b"M 100644 inline objects.yaml\ndata %d\n%s\n" % (len(content), content)
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input=stream, check=True, capture_output=True)


@dataclass
class Repos:
    """N bare repositories served by `server`; `desired` is each ConfigMap's value at the repository's HEAD."""

    root: Path
    server: GitHTTPServer
    objects: int
    desired: dict[str, str] = field(default_factory=dict)
    values: dict[str, dict[int, str]] = field(default_factory=dict)

    @staticmethod
    def tag(i: int) -> str:
        return f"s{i:04d}"

    def ensure(self, n: int) -> None:
        for i in range(n):
            tag = self.tag(i)
            repo = self.root / f"{tag}.git"
            if repo.exists():
                continue
            subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(repo)], check=True)
            fast_import(repo, manifest(tag, self.objects, {}), "objects", parent=False)
            self.values[tag] = {}
            for k in range(self.objects):
                self.desired[f"{tag}-cm{k}"] = f"{tag}-{k}"

    def url(self, i: int) -> str:
        return f"{self.server.base_url}/{self.root.name}/{self.tag(i)}.git"

    def commit(self, i: int, k: int, value: str) -> None:
        tag = self.tag(i)
        self.values[tag][k] = value
        fast_import(self.root / f"{tag}.git", manifest(tag, self.objects, self.values[tag]), value, parent=True)
        self.desired[f"{tag}-cm{k}"] = value


# -- what the bench observes --------------------------------------------------------------------------


class Watcher:
    """A watch on the ConfigMaps of one namespace: when each name last showed each value (arrival time)."""

    def __init__(self, c: Client, namespace: str) -> None:
        self.c, self.ns = c, namespace
        self.seen: dict[tuple[str, str], float] = {}
        self.cond = threading.Condition()
        self.stopped = False
        rv = c.request("GET", f"/api/v1/namespaces/{namespace}/configmaps", query={"limit": "1"})["metadata"][
            "resourceVersion"
        ]
        self.thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self.thread.start()

    def _run(self, rv: str) -> None:
        while not self.stopped:
            try:
                for line in self.c.stream_lines(
                    f"/api/v1/namespaces/{self.ns}/configmaps",
                    query={"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true"},
                    timeout=120,
                ):
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        key = (obj["metadata"]["name"], str((obj.get("data") or {}).get("value")))
                        with self.cond:
                            self.seen[key] = time.monotonic()
                            self.cond.notify_all()
            except Exception as exc:  # a broken watch is re-opened; the bench reports timeouts
                if not self.stopped:
                    log(f"watch {self.ns}: {exc}; re-opening")
                    time.sleep(0.5)

    def wait(self, name: str, value: str, after: float, timeout: float) -> float | None:
        """Seconds from `after` until `name` showed `value` (at or after `after`), or None."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                t = self.seen.get((name, value))
                if t is not None and t >= after:
                    return t - after
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def stop(self) -> None:
        self.stopped = True


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                out += [int(child), *_children(int(child))]
    return out


def _status(pid: int, key: str) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes and of their waited-for children (git fetches), in seconds."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(x) for x in f[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def _pss(pid: int) -> int:
    """Proportional set size: shared pages (libc, the git binary of concurrent fetches) split between the
    processes that map them, so a sum over processes counts each page once."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


# kcmp(2): whether two processes share one resource; KCMP_VM compares their address spaces.
_KCMP_SYSCALL = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
_KCMP_VM = 1


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def same_memory(a: int, b: int) -> bool:
    """Whether processes `a` and `b` share one address space. Python's subprocess starts git with vfork():
    until it execs, the child runs in its parent's memory, and its smaps_rollup reports all of it as its own
    PSS. Summed with the parent's, one spawn caught by a sample counted the daemon twice (a peak of
    134 + 134 MB for a 134 MB process at 1,000 x 4). Without kcmp here: False, each counted."""
    if a == b:
        return True
    if _KCMP_SYSCALL is None:
        return False
    return int(_libc().syscall(_KCMP_SYSCALL, a, b, _KCMP_VM, 0, 0)) == 0


def distinct_memory(pids: list[int]) -> list[int]:
    """`pids` less those that share another's address space (a vfork child before its exec): each counted once."""
    kept: list[int] = []
    for pid in pids:
        if not any(same_memory(pid, other) for other in kept):
            kept.append(pid)
    return kept


class Sampler:
    """PSS of the processes and their live children summed, every 0.25 s; the peak of that sum. A child that
    shares its parent's memory (vfork, before exec) is not counted again (`distinct_memory`)."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.peak = 0
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped:
            every = [p for pid in self.pids for p in (pid, *_children(pid))]
            self.peak = max(self.peak, sum(_pss(p) for p in distinct_memory(every)))
            time.sleep(0.25)

    def hwm(self) -> int:
        return sum(_status(p, "VmHWM") for p in self.pids)

    def stop(self) -> None:
        self.stopped = True
        self.thread.join(2)


# -- the two tools ----------------------------------------------------------------------------------------


class Tool:
    """What the case needs of a tool: start, create its sources, count Ready ones, change intervals, stop."""

    name = ""
    agents: tuple[str, ...] = ()
    short: bool = False  # also measured at SHORT_INTERVAL

    def start(self, cluster: BenchCluster, namespace: str, work: Path) -> list[int]:
        raise NotImplementedError

    def sources(self, namespace: str, repos: Repos, n: int, interval: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def ready(self, c: Client, namespace: str) -> set[str]:
        raise NotImplementedError

    def set_interval(self, c: Client, namespace: str, n: int, interval: str) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def own_figures(self) -> dict[str, Any]:
        """What the tool itself counts (gitops-sync: its /status requests block), when it says."""
        return {}

    def flags(self) -> str:
        return ""


def _ready_items(c: Client, path: str) -> set[str]:
    """The names whose Ready condition is True for their current generation in one LIST."""
    items = c.request("GET", path).get("items") or []
    return {
        (o.get("metadata") or {}).get("name", "")
        for o in items
        if any(
            cond.get("type") == "Ready"
            and cond.get("status") == "True"
            and cond.get("observedGeneration", (o.get("metadata") or {}).get("generation"))
            == (o.get("metadata") or {}).get("generation")
            for cond in (o.get("status") or {}).get("conditions") or []
        )
    }


class GitopsSync(Tool):
    name = "gitops-sync"
    agents = (GS_AGENT,)

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.d: DaemonProcess | None = None

    def start(self, cluster: BenchCluster, namespace: str, work: Path) -> list[int]:
        self.d = DaemonProcess(
            [*GS, "run", "--watch-namespace", namespace, "--workers", str(self.workers)],
            cluster.env,
            work / f"gitops-sync-{namespace}.log",
        )
        if self.d.wait_ready(120) is None:
            raise SystemExit(f"bench: gitops-sync run did not get ready; log {self.d.log_path}")
        return [self.d.proc.pid]

    def sources(self, namespace: str, repos: Repos, n: int, interval: str) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": "gitops-sync.io/v1alpha1",
                "kind": "GitSync",
                "metadata": {"name": repos.tag(i), "namespace": namespace},
                "spec": {"repository": repos.url(i), "revision": "main", "interval": interval},
            }
            for i in range(n)
        ]

    def ready(self, c: Client, namespace: str) -> set[str]:
        return _ready_items(c, f"/apis/gitops-sync.io/v1alpha1/namespaces/{namespace}/gitsyncs")

    def set_interval(self, c: Client, namespace: str, n: int, interval: str) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        if self.d is not None:
            self.d.stop()

    def own_figures(self) -> dict[str, Any]:
        """Its API requests and the bytes of their answers (the client's counts: load-independent)."""
        if self.d is None:
            return {}
        code, body = self.d.get("/status", timeout=120)
        if code != 200:
            return {}
        fleet = json.loads(body).get("fleet") or {}
        return {
            "requests": {**(fleet.get("requests") or {}), "bytesRead": fleet.get("bytesRead", 0)},
            "cache_objects": sum(w.get("objects", 0) for w in fleet.get("watches") or []),
        }

    def flags(self) -> str:
        return f"run --watch-namespace NS --workers {self.workers}"


class Flux(Tool):
    name = "flux"
    agents = flux.USER_AGENTS
    short = True

    def __init__(self, cluster: BenchCluster, bin_dir: Path) -> None:
        self.cluster, self.bin_dir = cluster, bin_dir
        self.peer: flux.FluxPeer | None = None
        self._flags = ""

    def start(self, cluster: BenchCluster, namespace: str, work: Path) -> list[int]:
        self.peer = flux.FluxPeer(cluster, self.bin_dir, work / f"flux-{namespace}")
        self.peer.wait_ready()
        self._flags = "; ".join(f"{k} {v}" for k, v in self.peer.flags().items())
        return self.peer.pids

    def sources(self, namespace: str, repos: Repos, n: int, interval: str) -> list[dict[str, Any]]:
        return [o for i in range(n) for o in flux.source_objects(repos.tag(i), namespace, repos.url(i), interval)]

    def ready(self, c: Client, namespace: str) -> set[str]:
        return _ready_items(c, f"/apis/{flux.GROUP_KUSTOMIZE}/namespaces/{namespace}/kustomizations")

    def set_interval(self, c: Client, namespace: str, n: int, interval: str) -> None:
        for group, plural in ((flux.GROUP_SOURCE, "gitrepositories"), (flux.GROUP_KUSTOMIZE, "kustomizations")):
            for i in range(n):
                c.request(
                    "PATCH",
                    f"/apis/{group}/namespaces/{namespace}/{plural}/{Repos.tag(i)}",
                    body={"spec": {"interval": interval}},
                    content_type="application/merge-patch+json",
                )

    def stop(self) -> None:
        if self.peer is not None:
            self.peer.stop()

    def flags(self) -> str:
        return self._flags


# -- one tool at one size ----------------------------------------------------------------------------------


@dataclass
class Ctx:
    cluster: BenchCluster
    c: Client
    audit: AuditCounter | None
    repos: Repos
    work: Path
    idle: float
    drifts: int
    commits: int
    ready_timeout: float
    interval: str
    ready_only: bool = False


def seconds(interval: str) -> float:
    """A Go-style duration as both tools take it ("1m", "10s", "1m30s") in seconds."""
    import re

    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(v) * units[u] for v, u in re.findall(r"([0-9.]+)(ms|s|m|h)", interval))


def _plural(kind: str) -> str:
    return {"GitSync": "gitsyncs", "GitRepository": "gitrepositories", "Kustomization": "kustomizations"}[kind]


def _create(c: Client, objs: list[dict[str, Any]]) -> None:
    """POST every object from 8 threads (as `kubectl apply -f dir` of many files would send them)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(o: dict[str, Any]) -> None:
        group = o["apiVersion"]
        ns = o["metadata"]["namespace"]
        c.request("POST", f"/apis/{group}/namespaces/{ns}/{_plural(o['kind'])}", body=o)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, objs))


def _requests(ctx: Ctx, mark: Any, agents: tuple[str, ...]) -> dict[str, int]:
    """Reads (get, list), writes and dry-run writes of the tool's user agents since `mark` (audit log)."""
    if ctx.audit is None or mark is None:
        return {"reads": -1, "writes": -1, "dry_runs": -1}
    out = {"reads": 0, "writes": 0, "dry_runs": 0}
    for agent in agents:
        w = ctx.audit.count(mark, agent, [])
        out["reads"] += w.reads
        out["writes"] += w.writes
        out["dry_runs"] += w.dry_runs
    return out


def _drift(ctx: Ctx, watch: Watcher, ns: str, n: int, timeout: float, round_: int) -> list[float | None]:
    """Change one ConfigMap value in `ctx.drifts` sources at once; seconds until each is Git's again."""
    picks = sorted({(k * n) // ctx.drifts for k in range(ctx.drifts)})
    pending: list[tuple[str, str, float]] = []
    for k, i in enumerate(picks):
        name = f"{Repos.tag(i)}-cm{(k + round_) % ctx.repos.objects}"
        t0 = time.monotonic()
        ctx.c.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/configmaps/{name}",
            body={"data": {"value": f"drifted-{round_}-{k}"}},
            query={"fieldManager": DRIFT_MANAGER},
            content_type="application/merge-patch+json",
        )
        pending.append((name, ctx.repos.desired[name], t0))
    deadline = time.monotonic() + timeout
    return [watch.wait(name, want, t0, max(0.0, deadline - time.monotonic())) for name, want, t0 in pending]


def _commit(ctx: Ctx, watch: Watcher, n: int, timeout: float, round_: int) -> list[float | None]:
    """A new commit in `ctx.commits` repositories at once (one ConfigMap value each); seconds until applied."""
    picks = sorted({(k * n) // ctx.commits + (1 if n > ctx.commits else 0) for k in range(ctx.commits)})
    picks = [min(i, n - 1) for i in picks]
    pending: list[tuple[str, str, float]] = []
    for k, i in enumerate(dict.fromkeys(picks)):
        value = f"commit-{round_}-{k}-{uuid.uuid4().hex[:6]}"
        t0 = time.monotonic()
        ctx.repos.commit(i, 0, value)
        pending.append((f"{Repos.tag(i)}-cm0", value, t0))
    deadline = time.monotonic() + timeout
    return [watch.wait(name, want, t0, max(0.0, deadline - time.monotonic())) for name, want, t0 in pending]


def _latency(values: list[float | None]) -> dict[str, Any]:
    got = [v for v in values if v is not None]
    return {
        "n": len(values),
        "missed": len(values) - len(got),
        "p50": percentile(got, 50),
        "p95": percentile(got, 95) if len(got) == len(values) else float("inf"),
    }


def _idle(ctx: Ctx, tool: Tool, pids: list[int]) -> dict[str, float]:
    mark = ctx.audit.mark() if ctx.audit else None
    git0, cpu0, t0 = ctx.repos.server.requests, cpu_seconds(pids), time.monotonic()
    time.sleep(ctx.idle)
    minutes = (time.monotonic() - t0) / 60
    req = _requests(ctx, mark, tool.agents)
    return {
        "rpm": round(sum(req.values()) / minutes, 1),
        "dry_runs_pm": round(req["dry_runs"] / minutes, 1),
        "writes_pm": round(req["writes"] / minutes, 1),
        "git_pm": round((ctx.repos.server.requests - git0) / minutes, 1),
        "cpu_pm": round((cpu_seconds(pids) - cpu0) / minutes, 2),
    }


def run_tool(ctx: Ctx, tool: Tool, n: int) -> dict[str, Any]:
    ns = f"{tool.name}-{n}x{ctx.repos.objects}-{uuid.uuid4().hex[:4]}"
    ctx.c.request(
        "POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    watch = Watcher(ctx.c, ns)
    log(f"{tool.name} {n}x{ctx.repos.objects}: starting in namespace {ns}")
    pids = tool.start(ctx.cluster, ns, ctx.work)
    sampler = Sampler(pids)
    out: dict[str, Any] = {"namespace": ns, "flags": tool.flags()}
    try:
        cpu0 = cpu_seconds(pids)
        mark = ctx.audit.mark() if ctx.audit else None
        t0 = time.monotonic()
        _create(ctx.c, tool.sources(ns, ctx.repos, n, ctx.interval))
        # Every source Ready at least once: kustomize-controller sets Ready=Unknown ("Reconciliation in
        # progress") at the start of every reconcile, so at 1,000 Kustomizations on a 1m interval about 20
        # are never Ready at the same instant.
        seen: set[str] = set()
        while True:
            seen |= tool.ready(ctx.c, ns)
            if len(seen) >= n:
                break
            if time.monotonic() - t0 > ctx.ready_timeout:
                raise SystemExit(f"bench: {tool.name}: not all {n} sources Ready after {ctx.ready_timeout:.0f} s")
            time.sleep(0.5 if n < 500 else 2.0)  # a LIST of every source: heavy at 1,000
        out["ready_s"] = round(time.monotonic() - t0, 1)
        out["ready_cpu_s"] = round(cpu_seconds(pids) - cpu0, 1)
        out["ready_requests"] = _requests(ctx, mark, tool.agents)
        out["ready_peak_rss"], out["ready_hwm_sum"] = sampler.peak, sampler.hwm()
        out["ready_own"] = tool.own_figures()
        out["ready_load"] = os.getloadavg()
        log(f"{tool.name}: all {n} Ready in {out['ready_s']} s ({out['ready_cpu_s']} CPU s)")
        if ctx.ready_only:
            return out
        # Steady state: every source has been polled once more since it got Ready (its second pass writes
        # what changed since the first, e.g. status counts going from create to unchanged), and settled.
        interval_s = seconds(ctx.interval)
        time.sleep(interval_s * 1.1 + 10)
        out["idle"] = _idle(ctx, tool, pids)
        log(f"{tool.name}: idle {out['idle']}")
        out["drift"] = _latency(_drift(ctx, watch, ns, n, interval_s * 2 + 60, 0))
        log(f"{tool.name}: drift -> corrected {out['drift']}")
        out["commit"] = _latency(_commit(ctx, watch, n, interval_s * 2 + 90, 0))
        log(f"{tool.name}: commit -> applied {out['commit']}")
        out["cpu_s"] = round(cpu_seconds(pids) - cpu0, 1)  # the same phases for both tools
        if tool.short:
            cpu1 = cpu_seconds(pids)
            tool.set_interval(ctx.c, ns, n, SHORT_INTERVAL)
            time.sleep(15)  # every object reconciled once at the new interval
            out["drift_short"] = _latency(_drift(ctx, watch, ns, n, 10 * 2 + 60, 1))
            log(f"{tool.name} at {SHORT_INTERVAL}: drift -> corrected {out['drift_short']}")
            out["commit_short"] = _latency(_commit(ctx, watch, n, 10 * 2 + 90, 1))
            log(f"{tool.name} at {SHORT_INTERVAL}: commit -> applied {out['commit_short']}")
            out["idle_short"] = _idle(ctx, tool, pids)
            log(f"{tool.name} at {SHORT_INTERVAL}: idle {out['idle_short']}")
            out["cpu_short_s"] = round(cpu_seconds(pids) - cpu1, 1)
        out["peak_rss"] = sampler.peak
        out["hwm_sum"] = sampler.hwm()
    finally:
        sampler.stop()
        watch.stop()
        tool.stop()
    return out


# -- main ---------------------------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        if part.strip():
            a, b = part.lower().split("x")
            out.append((int(a), int(b)))
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench.fleet_flux", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", default="100x10", help="NxM: N sources of M ConfigMaps each (default 100x10)")
    p.add_argument("--idle", type=float, default=60.0, help="seconds of each idle window")
    p.add_argument("--drifts", type=int, default=20, help="sources drifted at once (one ConfigMap each)")
    p.add_argument("--commits", type=int, default=10, help="repositories given a new commit at once")
    p.add_argument(
        "--interval",
        default=DEFAULT_INTERVAL,
        help="every source's interval in the first phase (default 1m: GitSync's and the Flux CLI's default)",
    )
    p.add_argument("--workers", type=int, default=4, help="gitops-sync run --workers (its default: 4)")
    p.add_argument("--ready-timeout", type=float, default=1800.0)
    p.add_argument("--tools", default="gitops-sync,flux", help="which tools, in order")
    p.add_argument(
        "--ready-only",
        action="store_true",
        help="stop each tool once all its sources are Ready (no idle, drift or commit phase); print JSON, "
        "leave --output alone",
    )
    p.add_argument("--output", type=Path, default=REPO / "BENCHMARKS-fleet.md", help="markdown file to update")
    p.add_argument("--json", type=Path, default=None, help="also write every figure as JSON here")
    p.add_argument("--cache-dir", type=Path, default=None, help="the launcher's binary cache (LOCAL_CLUSTER_CACHE)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("auto", "warning")
    started = time.monotonic()
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    # before the cluster: a cold build takes tens of minutes
    bin_dir = flux.build(args.cache_dir) if "flux" in tools else Path()
    cluster = BenchCluster.start(None)
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-flux-"))
    (work / "git").mkdir()
    server = GitHTTPServer(work / "git").start()
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": machine(),
        "options": {
            "sizes": args.sizes,
            "idle": args.idle,
            "drifts": args.drifts,
            "commits": args.commits,
            "interval": args.interval,
        },
        "runs": [],
    }
    try:
        cluster.run_kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        if "flux" in tools:
            flux.install_crds(cluster, bin_dir)
            cluster.run_kubectl("create", "namespace", "flux-system")
        doc["versions"] = {**versions(cluster, sys.executable), **flux.versions()}
        audit = AuditCounter(cluster.audit_log) if cluster.audit_log else None
        with Client(cluster.kubeconfig, pool_size=16, user_agent=BENCH_USER_AGENT) as c:
            for n, m in parse_sizes(args.sizes):
                repos = Repos(work / "git" / f"m{m}", server, m)
                repos.root.mkdir(parents=True, exist_ok=True)
                repos.ensure(n)
                ctx = Ctx(
                    cluster,
                    c,
                    audit,
                    repos,
                    work,
                    args.idle,
                    args.drifts,
                    args.commits,
                    args.ready_timeout,
                    args.interval,
                    args.ready_only,
                )
                run: dict[str, Any] = {"sources": n, "objects": m, "interval": args.interval}
                for name in tools:
                    tool: Tool = GitopsSync(args.workers) if name == "gitops-sync" else Flux(cluster, bin_dir)
                    run[tool.name] = run_tool(ctx, tool, n)
                doc["runs"].append(run)
                print(json.dumps(run, default=str) if args.ready_only else fleet_report.text(run))
                _save(args, doc, started)  # after each size: a long run stopped later keeps what it measured
    finally:
        server.stop()
        cluster.stop()
    _save(args, doc, started)
    log(f"done in {doc['duration_seconds'] / 60:.1f} min (work dir {work})")
    return 0


def _save(args: argparse.Namespace, doc: dict[str, Any], started: float) -> None:
    doc["duration_seconds"] = round(time.monotonic() - started)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1, default=str))
    if args.output and not args.ready_only and doc["runs"]:
        fleet_report.write(args.output, doc)
        log(f"wrote {args.output}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
