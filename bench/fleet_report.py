"""From the fleet-vs-Flux figures (bench/fleet_flux.py) to a table with ratios and PASS/MISS, and to
BENCHMARKS-fleet.md.

Its own file rather than a section of BENCHMARKS.md: bench/run.py rewrites BENCHMARKS.md whole from its own
cases (a run takes ~45 min), this case takes its own time and cluster (`make bench-fleet`), and each size
is its own section here, so a run at (1,000, 4) replaces that section and keeps (100, 10)'s. BENCHMARKS.md
links here. The analysis between the keep markers is written by hand and carried over.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from bench.report import DASH, TIMES

KEEP_START = "<!-- keep: analysis (written by hand; bench/fleet_flux.py carries it over) -->"
KEEP_END = "<!-- /keep -->"
MB = 1_000_000

# Issue 28's targets: gitops-sync ÷ Flux in the same run (the all-Ready one is set at 1,000 sources).
TARGETS = {"ready": 0.5, "rss": 1.0, "idle": 1.0, "drift_p95": 0.1}


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.inf


def _s(x: float) -> str:
    if math.isinf(x) or math.isnan(x):
        return "timed out" if math.isinf(x) else DASH
    return f"{x:.2f} s" if x < 100 else f"{x:.0f} s"


def _ratio_text(a: float, b: float) -> str:
    """A p95 ratio; a p95 that timed out (some never applied within the wait) is said, never shown as a ratio of 0."""
    if math.isinf(b) and not math.isinf(a):
        return f"→ 0{TIMES} (Flux's p95 timed out)"
    if math.isinf(a):
        return "gitops-sync's p95 timed out"
    return f"{_ratio(a, b):.2f}{TIMES} (p95)"


def _lat(d: dict[str, Any] | None) -> str:
    if not d:
        return DASH
    missed = f", {d['missed']} of {d['n']} missed" if d.get("missed") else ""
    return f"p50 {_s(d['p50'])} / p95 {_s(d['p95'])}{missed}"


def _load(d: dict[str, Any]) -> str:
    load = d.get("ready_load")
    return f"{float(load[0]):.1f}" if load else DASH


def rows(run: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """(measure, gitops-sync, Flux, ratio, target, result) for one size."""
    g, f = run.get("gitops-sync") or {}, run.get("flux") or {}
    out: list[tuple[str, str, str, str, str, str]] = []

    def add(measure: str, a: float | None, b: float | None, fmt: Any, key: str | None, note: str = "") -> None:
        if a is None or b is None:
            out.append((measure, fmt(a) if a is not None else DASH, fmt(b) if b is not None else DASH, DASH, DASH, ""))
            return
        r = _ratio(a, b)
        target = f"≤ {TARGETS[key]}{TIMES}{note}" if key else DASH
        result = ("PASS" if r <= TARGETS[key] else "MISS") if key else ""
        out.append((measure, fmt(a), fmt(b), f"{r:.2f}{TIMES}", target, result))

    def get(d: dict[str, Any], *path: str) -> float | None:
        cur: Any = d
        for k in path:
            if not isinstance(cur, dict) or k not in cur:
                return None
            cur = cur[k]
        return float(cur)

    at = " (set at 1,000 sources)" if run["sources"] < 1000 else ""
    add("sources created → all Ready", get(g, "ready_s"), get(f, "ready_s"), _s, "ready", at)
    # The machine is shared: the load at that moment says how far the two times can be compared.
    loads = [_load(d) for d in (g, f)]
    out.append(("load average (1 min) when all Ready", loads[0], loads[1], DASH, DASH, ""))
    add(
        "peak memory: PSS of every process incl. children",
        get(g, "peak_rss"),
        get(f, "peak_rss"),
        lambda v: f"{v / MB:.0f} MB",
        "rss",
    )
    add(
        "VmHWM of the tool's own processes",
        get(g, "hwm_sum"),
        get(f, "hwm_sum"),
        lambda v: f"{v / MB:.0f} MB",
        None,
    )
    add("CPU seconds until all Ready", get(g, "ready_cpu_s"), get(f, "ready_cpu_s"), lambda v: f"{v:.1f} s", None)
    add(
        "CPU seconds, ready to the last commit (not Flux's 10s phase)",
        get(g, "cpu_s"),
        get(f, "cpu_s"),
        lambda v: f"{v:.1f} s",
        None,
    )
    for kind in ("reads", "writes", "dry_runs"):
        add(
            f"API {kind.replace('_', '-')} until all Ready (audit log)",
            get(g, "ready_requests", kind),
            get(f, "ready_requests", kind),
            lambda v: f"{v:.0f}",
            None,
        )
    add("API requests per minute, idle", get(g, "idle", "rpm"), get(f, "idle", "rpm"), lambda v: f"{v:.0f}", "idle")
    add(
        "of which writes per minute, idle",
        get(g, "idle", "writes_pm"),
        get(f, "idle", "writes_pm"),
        lambda v: f"{v:.0f}",
        None,
    )
    add(
        "of which dry-run writes per minute, idle",
        get(g, "idle", "dry_runs_pm"),
        get(f, "idle", "dry_runs_pm"),
        lambda v: f"{v:.0f}",
        None,
    )
    add("Git requests per minute, idle", get(g, "idle", "git_pm"), get(f, "idle", "git_pm"), lambda v: f"{v:.0f}", None)
    add("CPU seconds per idle minute", get(g, "idle", "cpu_pm"), get(f, "idle", "cpu_pm"), lambda v: f"{v:.2f}", None)
    at_default = f"Flux at {run.get('interval', '1m')}"
    for label, fk in ((at_default, "drift"), ("Flux at 10s", "drift_short")):
        gd, fd = g.get("drift"), f.get(fk)
        a = gd["p95"] if gd else None
        b = fd["p95"] if fd else None
        key = "drift_p95" if fk == "drift" else None
        if a is not None and b is not None:
            r = _ratio(a, b)
            result = ("PASS" if r <= TARGETS["drift_p95"] else "MISS") if key else ""
            target = f"≤ {TARGETS['drift_p95']}{TIMES}" if key else DASH
            out.append((f"drift → corrected ({label})", _lat(gd), _lat(fd), _ratio_text(a, b), target, result))
    for label, fk in ((at_default, "commit"), ("Flux at 10s", "commit_short")):
        gd, fd = g.get("commit"), f.get(fk)
        if gd and fd:
            out.append(
                (
                    f"new commit → applied ({label}; gitops-sync at {run.get('interval', '1m')})",
                    _lat(gd),
                    _lat(fd),
                    _ratio_text(gd["p95"], fd["p95"]),
                    DASH,
                    "",
                )
            )
    if f.get("idle_short"):
        out.append(
            ("Flux at 10s: API requests per minute, idle", DASH, f"{f['idle_short']['rpm']:.0f}", DASH, DASH, "")
        )
    return out


def text(run: dict[str, Any]) -> str:
    head = f"fleet vs Flux: {run['sources']} sources x {run['objects']} ConfigMaps"
    lines = [head, "-" * len(head)]
    for r in rows(run):
        lines.append(f"{r[0]:<58} {r[1]:<34} {r[2]:<34} {r[3]:<14} {r[4]:<28} {r[5]}")
    return "\n".join(lines)


def section(run: dict[str, Any]) -> str:
    n, m = run["sources"], run["objects"]
    tag = f"{n}x{m}"
    out = [
        f"<!-- size {tag} -->",
        f"### {n:,} sources {TIMES} {m} ConfigMaps ({n * m:,} objects), run {run.get('date', '?')}",
        "",
        "| measure | gitops-sync | Flux | ratio | target | result |",
        "|---|---|---|---:|---|---|",
    ]
    for r in rows(run):
        result = f"**{r[5]}**" if r[5] == "MISS" else r[5]
        out.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {result} |")
    out += ["", f"<!-- /size {tag} -->"]
    return "\n".join(out)


def _kept(previous: str) -> tuple[str, dict[str, str]]:
    m = re.search(re.escape(KEEP_START) + r".*?" + re.escape(KEEP_END), previous, flags=re.S)
    sizes = {
        s.group(1): s.group(0) for s in re.finditer(r"<!-- size (\d+x\d+) -->.*?<!-- /size \1 -->", previous, re.S)
    }
    return (m.group(0) if m else f"{KEEP_START}\n\n{KEEP_END}"), sizes


def write(path: Path, doc: dict[str, Any]) -> None:
    previous = path.read_text() if path.is_file() else ""
    analysis, sizes = _kept(previous)
    for run in doc["runs"]:
        run.setdefault("date", doc["date"])
        sizes[f"{run['sources']}x{run['objects']}"] = section(run)
    order = sorted(sizes, key=lambda k: tuple(int(x) for x in k.split("x")))
    mach, ver = doc["machine"], doc.get("versions", {})
    last = doc["runs"][-1] if doc["runs"] else {}
    gflags = (last.get("gitops-sync") or {}).get("flags", "?")
    fflags = (last.get("flux") or {}).get("flags", "?")
    body = "\n\n".join(sizes[k] for k in order)
    path.write_text(
        f"""# Benchmarks: gitops-sync's fleet controller vs Flux

[← BENCHMARKS.md](BENCHMARKS.md) · Written by `make bench-fleet` (bench/fleet_flux.py); each size is its own
section, replaced when that size is run again. Ratio = gitops-sync ÷ Flux from the same run; targets are issue
28's. Latest run: {doc["date"]}, {doc.get("duration_seconds", 0) / 60:.1f} min.

- **Machine**: {mach.get("nproc")} cores ({mach.get("cpu")}), {mach.get("memory_gib")} GiB, Linux {mach.get("kernel")};
  load average at the start {mach.get("loadavg_at_start")}. The API server, etcd, the cluster's controllers,
  the Git server and the tool under test share these cores.
- **Versions**: gitops-sync {ver.get("gitops_sync", "?")}, Python {ver.get("python", "?")}; Flux
  {ver.get("flux", "?")}: source-controller {ver.get("source-controller", "?")}, kustomize-controller
  {ver.get("kustomize-controller", "?")} (built here from their Go modules by `cluster.py build --with flux`);
  Kubernetes {ver.get("kubernetes_server", "?")} (deploy/local-cluster).
- **gitops-sync**: `gitops-sync {gflags}`, defaults otherwise (its fleet's `--workers` default is 4).
- **Flux**: {fflags}; both out of cluster with the admin kubeconfig, leader election off.

{body}

{analysis}

## How it is measured

One private control plane (`cluster.py up --auto-ports`) and one Git server on loopback (smart HTTP,
`git http-backend`; bench/gitserver.py) per run; N bare repositories of M ConfigMaps (one `objects.yaml`,
~250 bytes each). Each tool, one after the other, gets a fresh namespace: gitops-sync one GitSync per
repository (`revision: main`, interval 1m), Flux one GitRepository (`ref.branch: main`) + one Kustomization
(`path: ./`, `prune: false`, `targetNamespace`) per repository, interval 1m (the Flux CLI's default). The
tool is started and healthy before the clock starts.

- **all Ready**: from the first POST of a source (8 at a time) until a LIST shows every GitSync /
  Kustomization with `Ready=True` for its current generation (polled every 0.5 s).
- **peak memory**: the sum of PSS (proportional set size, /proc/PID/smaps_rollup: a page shared by several
  processes counted once in all) over the tool's processes and their children (gitops-sync runs `git`),
  sampled every 0.25 s for the whole run. A child still sharing its parent's memory (Python starts `git`
  with vfork: until it execs, its smaps_rollup is its parent's) is not counted twice: kcmp(2) tells. The row
  under it is the kernel's high-water mark (VmHWM) of the tool's own processes alone (gitops-sync's one,
  Flux's two summed). MB = 10^6 bytes.
- **CPU seconds**: utime + stime of the processes and their waited-for children (/proc/PID/stat).
- **API requests**: the audit log's events by user agent (`gitops-sync/`, `source-controller`,
  `kustomize-controller`): writes, dry-run writes, and gets/lists of the admin identity (both tools use
  it). Watches are not audited, so neither tool's watch streams count.
- **idle**: a {doc.get("options", {}).get("idle", 60):.0f}-second window (`--idle`) that starts one interval
  (+10% jitter, +10 s) after all Ready, so every source has been polled again since; nothing changes.
- **drift → corrected**: one ConfigMap value in each of D sources (`--drifts`) changed at once by a merge
  patch under the field manager `bench-drift`; from just before each patch until the bench's watch shows
  Git's value again. Flux corrects at its Kustomization interval, so its figures are shown at 1m and again
  after every interval is set to 10s.
- **new commit → applied**: a commit changing one ConfigMap value in each of K repositories (`--commits`)
  at once; from just before each commit until the watch shows the new value. Both tools poll Git (no
  webhooks): the interval bounds it.
"""
    )
