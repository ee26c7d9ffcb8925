"""gitops-sync vs kubectl on the local control plane: `make bench`.

    .venv/bin/python bench/run.py                      # N = 100, 1,000, 5,000; medians of 3; BENCHMARKS.md
    .venv/bin/python bench/run.py --quick              # CI: N = 100, one run, smaller daemon cases, no file
    .venv/bin/python bench/run.py --cases 6 --scale-objects 1000,5000,20000 --output /tmp/scale.md
                                                       # case 6 alone, per-object figures across sizes
    .venv/bin/python bench/run.py --kubeconfig FILE    # reuse a running cluster instead of starting one

Starts its own local control plane (deploy/local-cluster, `--auto-ports`, a state dir of its own) unless
--kubeconfig is given, and stops it at the end. Prints the table on stdout, progress on stderr, and writes
the table with the machine, versions and date to BENCHMARKS.md (and every figure to --json when given).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `gitops_sync` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import daemon as daemon_cases
from bench.cases import Measure, Runner, Tools
from bench.charts import chart_case, chart_rows
from bench.env import REPO, BenchCluster, log, machine, versions
from bench.report import case_rows, daemon_rows, markdown, scale_rows, startup_rows, text_table
from bench.scale import QUICK_RESYNC, RESYNC, scale_case
from bench.startup import startup_case
from bench.workload import generate
from gitops_sync.log import configure as configure_logging

NOT_AVAILABLE = "not measured: daemon not available"
ALL_CASES = (0, 1, 2, 3, 4, 5, 6, 7)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", default=None, help="comma-separated object counts (default 100,1000,5000)")
    p.add_argument("--repeats", type=int, default=None, help="runs per size; medians are reported (default 3)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="CI mode: N=100, 1 repeat, 10 daemon changes and 3 commits at 100 objects, RSS at 500, case 6 at 150",
    )
    p.add_argument("--kubeconfig", type=Path, default=None, help="reuse this cluster instead of starting one")
    p.add_argument(
        "--cluster-dir",
        type=Path,
        default=None,
        help="state dir for the cluster the bench starts (default: a new temporary dir)",
    )
    p.add_argument("--keep-cluster", action="store_true", help="leave the started cluster running")
    p.add_argument(
        "--output",
        type=Path,
        default=None,
        help="markdown file to write (default BENCHMARKS.md when every case runs and not --quick)",
    )
    p.add_argument("--json", type=Path, default=None, help="also write every figure as JSON here")
    p.add_argument("--cases", default=None, help="which cases to run (default all: 0,1,2,3,4,5,6,7)")
    p.add_argument("--startup-repeats", type=int, default=None, help="runs of each command in case 0 (default 15)")
    p.add_argument("--daemon-objects", type=int, default=None, help="objects in case 4 (default 1000)")
    p.add_argument("--daemon-changes", type=int, default=None, help="out-of-band changes in case 4a (default 50)")
    p.add_argument("--daemon-commits", type=int, default=None, help="commits in case 4b (default 20)")
    p.add_argument("--rss-objects", type=int, default=None, help="objects in case 5 (default 10000)")
    p.add_argument(
        "--scale-objects",
        default=None,
        help="comma-separated object counts of case 6, one run each (default 20000; --quick 150)",
    )
    p.add_argument("--scale-changes", type=int, default=None, help="out-of-band changes in case 6 (default 30)")
    p.add_argument(
        "--scale-pairs",
        type=int,
        default=None,
        help="alternating cold-apply pairs (CLI, then daemon) of case 6g at each size (default 2; --quick 1)",
    )
    p.add_argument("--chart-objects", type=int, default=None, help="objects the chart of case 7 renders (default 100)")
    p.add_argument("--chart-repeats", type=int, default=None, help="no-op runs of each source in case 7 (default 9)")
    p.add_argument("--concurrency", type=int, default=None, help="pass --concurrency to gitops-sync")
    p.add_argument("--python", default=sys.executable, help="the Python that has gitops-sync installed")
    args = p.parse_args(argv)
    quick = args.quick
    args.sizes = [int(s) for s in (args.sizes or ("100" if quick else "100,1000,5000")).split(",") if s.strip()]
    args.repeats = args.repeats or (1 if quick else 3)
    args.daemon_objects = args.daemon_objects or (100 if quick else 1000)
    args.daemon_changes = args.daemon_changes or (10 if quick else 50)
    args.daemon_commits = args.daemon_commits or (3 if quick else 20)
    args.rss_objects = args.rss_objects or (500 if quick else 10000)
    args.startup_repeats = args.startup_repeats or (3 if quick else 15)
    args.scale_objects = [int(s) for s in (args.scale_objects or ("150" if quick else "20000")).split(",") if s.strip()]
    args.scale_changes = args.scale_changes or (3 if quick else 30)
    args.scale_pairs = (1 if quick else 2) if args.scale_pairs is None else args.scale_pairs
    args.chart_objects = args.chart_objects or (20 if quick else 100)
    args.chart_repeats = args.chart_repeats or (1 if quick else 9)
    args.cases = {int(c) for c in (args.cases or ",".join(map(str, ALL_CASES))).split(",") if c.strip()}
    if args.output is None and not quick and args.cases == set(ALL_CASES):
        args.output = REPO / "BENCHMARKS.md"  # only a full run replaces the published table
    return args


def gitops_sync_argv(python: str) -> list[str]:
    """The installed console script next to the interpreter (what a user runs), else `python -m gitops_sync`."""
    script = Path(python).parent / "gitops-sync"
    return [str(script)] if script.exists() else [python, "-m", "gitops_sync"]


def compile_bytecode(python: str) -> str:
    """Compile the package's bytecode as `pip install .` leaves it: an editable install under
    PYTHONDONTWRITEBYTECODE=1 (this machine's environment) never writes any, and every command would
    then compile ~80 modules before its first request (~0.09 s). Returns the directory compiled."""
    where = subprocess.run(
        [python, "-c", "import gitops_sync, os; print(os.path.dirname(gitops_sync.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run([python, "-m", "compileall", "-q", where], check=True)
    return where


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()

    def on_term(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_term)
    cluster = BenchCluster.reuse(args.kubeconfig) if args.kubeconfig else BenchCluster.start(args.cluster_dir)
    workdir = Path(tempfile.mkdtemp(prefix="gitops-sync-bench-work-"))
    try:
        return _run(args, cluster, workdir, started)
    finally:
        if not args.keep_cluster:
            cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _run(args: argparse.Namespace, cluster: BenchCluster, workdir: Path, started: float) -> int:
    configure_logging("auto", "warning")  # the bench's own client requests are not worth a line each
    gs = gitops_sync_argv(args.python)
    log(f"compiled the bytecode of {compile_bytecode(args.python)} (as an installed package has it)")
    log(
        f"cluster {cluster.kubeconfig} (audit log: {cluster.audit_log or 'none, using /metrics'}); "
        f"gitops-sync: {' '.join(gs)}; work dir {workdir}"
    )
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": machine(),
        "versions": versions(cluster, args.python),
        "options": {
            "sizes": args.sizes,
            "repeats": args.repeats,
            "quick": args.quick,
            "concurrency": args.concurrency,
            "argv": shlex.join(sys.argv[1:]) or "defaults",
            "daemon_objects": args.daemon_objects,
            "rss_objects": args.rss_objects,
            "startup_repeats": args.startup_repeats,
            "scale_objects": args.scale_objects,
            "scale_changes": args.scale_changes,
            "scale_pairs": args.scale_pairs,
            "chart_objects": args.chart_objects,
            "chart_repeats": args.chart_repeats,
        },
    }
    if 0 in args.cases:
        doc["startup"] = startup_case(cluster, gs, args.python, workdir, args.startup_repeats).to_dict()
    cases: dict[str, dict[str, dict[str, list[Measure]]]] = {"cold": {}, "noop": {}, "drift": {}}
    if args.cases & {1, 2, 3}:
        runner = Runner(Tools(cluster, gs, args.concurrency), workdir)
        try:
            for n in args.sizes:
                directory = generate(workdir / f"objects-{n}", n)
                for r in range(args.repeats):
                    log(f"N={n}: run {r + 1} of {args.repeats}")
                    one = runner.run_repeat(directory, n, r)
                    for case, tools in one.items():
                        for tool, m in tools.items():
                            cases[case].setdefault(str(n), {}).setdefault(tool, []).append(m)
        finally:
            runner.close()

    have_daemon = daemon_cases.available(gs, cluster.env)
    if 4 in args.cases and have_daemon:
        d = daemon_cases.latency_cases(
            cluster, gs, workdir, args.daemon_objects, args.daemon_changes, args.daemon_commits
        )
        doc["daemon"] = d.to_dict()
    else:
        doc["daemon"] = {"not_measured": NOT_AVAILABLE if not have_daemon else "not measured: case not selected"}
    if 5 in args.cases and have_daemon:
        doc["rss"] = daemon_cases.rss_case(cluster, gs, workdir, args.rss_objects).to_dict()
    else:
        doc["rss"] = {"not_measured": NOT_AVAILABLE if not have_daemon else "not measured: case not selected"}

    doc["scale"] = _scale(args, cluster, gs, workdir, have_daemon) if 6 in args.cases else []
    if 7 in args.cases:
        runner = Runner(Tools(cluster, gs, args.concurrency), workdir)
        try:
            doc["chart"] = chart_case(cluster, gs, workdir, runner, args.chart_objects, args.chart_repeats).to_dict()
        finally:
            runner.close()

    rows = (
        startup_rows(doc.get("startup"))
        + case_rows(cases)
        + daemon_rows(doc["daemon"], doc["rss"])
        + scale_rows(doc["scale"])
        + chart_rows(doc.get("chart"))
    )
    doc["duration_seconds"] = time.monotonic() - started
    doc["rows"] = [r.to_dict() for r in rows]
    doc["cases"] = {
        c: {n: {t: [m.to_dict() for m in ms] for t, ms in tools.items()} for n, tools in per.items()}
        for c, per in cases.items()
    }
    print(text_table(rows))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    if args.output:
        args.output.write_text(markdown(doc, rows, cases, args.output))
        log(f"wrote {args.output}")
    log(f"done in {doc['duration_seconds'] / 60:.1f} min")
    return 1 if any(r.result == "ERROR" for r in rows) else 0


def _scale(
    args: argparse.Namespace, cluster: BenchCluster, gs: list[str], workdir: Path, have_daemon: bool
) -> list[dict[str, Any]]:
    """Case 6 at each --scale-objects size (the CLI, then the daemon when there is one)."""
    runner = Runner(Tools(cluster, gs, args.concurrency), workdir)
    out = []
    try:
        for n in args.scale_objects:
            resync = QUICK_RESYNC if args.quick else RESYNC
            res = scale_case(
                cluster,
                gs,
                workdir,
                runner,
                n,
                args.scale_changes,
                daemon=have_daemon,
                resync=resync,
                pairs=args.scale_pairs if have_daemon else 0,
            )
            out.append(res.to_dict())
    finally:
        runner.close()
    return out


__all__ = ["main"]

if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
