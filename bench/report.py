"""From measurements to the table: medians, ratios, targets, PASS/MISS; text for the terminal, BENCHMARKS.md.

A line says PASS only when every run behind it did what it should (right exit code, every object applied,
every drifted object found); otherwise ERROR with the reason, never a number that hides a failure.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cases import GITOPS_SYNC, KUBECTL, Measure
from bench.floor import FLOOR

KEEP_START = "<!-- keep: analysis (written by hand; bench/run.py carries it over) -->"
KEEP_END = "<!-- /keep -->"

DASH = "\u2013"  # en dash: "no figure" in a table cell
TIMES = "\u00d7"  # multiplication sign of the ratios

TARGETS = {
    "diff_one": 1.0,  # issue 13: a diff of one object no slower than kubectl's
    "cold": 0.5,
    "noop": 0.1,
    "drift": 0.3,
    "detect_p95": 1.0,
    "commit_p95": 2.0,
    "rss_mb": 300.0,
    "daemon_cold": 1.2,  # issue 28: the daemon's cold apply at 20,000 objects within 1.2x of the CLI's (6g)
    "daemon_kb": 13.0,  # issue 28: peak RSS per managed object at 20,000 objects (6f)
}


@dataclass
class Row:
    case: str
    n: str
    ours: str
    kubectl: str
    ratio: str
    target: str
    result: str
    note: str = ""

    def to_dict(self) -> dict[str, str]:
        return dict(self.__dict__)


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 100 else f"{seconds:.0f} s"


def _med(ms: list[Measure]) -> float:
    return statistics.median(m.seconds for m in ms)


def _failed(ms: list[Measure]) -> str:
    bad = [m.note or f"exit {m.exit_code}" for m in ms if not m.ok]
    return "; ".join(dict.fromkeys(bad))


def _writes(ms: list[Measure]) -> str:
    values = [m.server_writes for m in ms]
    if any(v is None for v in values):
        metric = [m.metrics_writes for m in ms]
        if any(v is None for v in metric):
            return "writes n/a"
        return f"{max(int(v or 0) for v in metric)} writes (metrics)"
    vals = sorted({int(v or 0) for v in values})
    return f"{vals[0]} writes" if len(vals) == 1 else f"{vals[0]}-{vals[-1]} writes"


def _max_writes(ms: list[Measure]) -> int | None:
    values = [m.server_writes if m.server_writes is not None else m.metrics_writes for m in ms]
    if any(v is None for v in values):
        return None
    return max(int(v or 0) for v in values)


CASE_TITLES = {"cold": "1. cold sync", "noop": "2. no-op re-sync", "drift": "3. drift report (10 drifted)"}


def case_rows(cases: dict[str, dict[str, dict[str, list[Measure]]]], titles: dict[str, str] = CASE_TITLES) -> list[Row]:
    rows: list[Row] = []
    for case in ("cold", "noop", "drift"):
        for n, tools in sorted(cases.get(case, {}).items(), key=lambda kv: int(kv[0])):
            ours, theirs = tools.get(GITOPS_SYNC, []), tools.get(KUBECTL, [])
            if not ours or not theirs:
                continue
            a, b = _med(ours), _med(theirs)
            ratio = a / b if b else math.inf
            target = TARGETS[case]
            ours_s, theirs_s = _s(a), _s(b)
            target_s = f"≤ {target}{TIMES}"
            passed = ratio <= target
            if case == "noop":
                ours_s += f", {_writes(ours)}"
                theirs_s += f", {_writes(theirs)}"
                target_s += ", 0 writes"
                passed = passed and _max_writes(ours) == 0
            if case == "drift":
                ours_s += f", found {_found(ours)}"
                theirs_s += f", found {_found(theirs)}"
            failure = _failed(ours + theirs)
            result = "ERROR" if failure else ("PASS" if passed else "MISS")
            rows.append(
                Row(titles[case], f"{int(n):,}", ours_s, theirs_s, f"{ratio:.2f}{TIMES}", target_s, result, failure)
            )
            floor = tools.get(FLOOR, [])
            if floor:  # the API server's own share (bench/floor.py): what no client can go below
                f = _med(floor)
                rows.append(
                    Row(
                        f"{titles[case]} ÷ floor",
                        f"{int(n):,}",
                        _s(a),
                        f"floor {_s(f)}",
                        f"{a / f if f else math.inf:.2f}{TIMES}",
                        DASH,
                        DASH,
                        _failed(floor),
                    )
                )
    return rows


def _found(ms: list[Measure]) -> str:
    vals = sorted({m.found for m in ms if m.found is not None})
    return "/".join(str(v) for v in vals) or "?"


def startup_rows(startup: dict[str, Any] | None) -> list[Row]:
    """Case 0 (bench/startup.py): medians of each command, side by side with kubectl and the Python floor."""
    if startup is None:
        return []
    seconds: dict[str, dict[str, list[float]]] = startup.get("seconds") or {}
    notes = "; ".join(dict.fromkeys(startup.get("notes") or []))

    def med(measure: str, tool: str) -> float | None:
        values = seconds.get(measure, {}).get(tool)
        return statistics.median(values) if values else None

    rows: list[Row] = []
    for measure, title, target in (
        ("version", "0a. start-up: `--version` vs `version --client`", None),
        ("diff", "0b. diff of one object", TARGETS["diff_one"]),
        ("first_request", "0c. process start → first API request", None),
    ):
        ours, theirs = med(measure, GITOPS_SYNC), med(measure, KUBECTL)
        if measure == "first_request" and (ours is None or theirs is None) and med("diff", GITOPS_SYNC) is not None:
            # kubectl's dry-run PATCH is a write, audited everywhere; gitops-sync's reads only where reads are
            why = "the cluster does not audit reads (deploy/local-cluster/audit-policy.yaml does)"
            rows.append(Row(title, "1", "not measured", DASH, DASH, DASH, "not measured", why))
            continue
        if ours is None or theirs is None:
            rows.append(Row(title, "1", "no figures", DASH, DASH, DASH, "ERROR", notes or "no samples"))
            continue
        ratio = ours / theirs
        verdict = DASH if target is None else ("PASS" if ratio <= target else "MISS")
        goal = DASH if target is None else f"≤ {target:g}{TIMES}"
        rows.append(Row(title, "1", _s(ours), _s(theirs), f"{ratio:.2f}{TIMES}", goal, verdict))
        floor = med(measure, FLOOR)
        if floor is not None:
            rows.append(
                Row(
                    f"{title} ÷ Python floor",
                    "1",
                    _s(ours),
                    f"floor {_s(floor)}",
                    f"{ours / floor:.2f}{TIMES}",
                    DASH,
                    DASH,
                )
            )
    if notes and rows:
        rows[-1].note = notes
    return rows


def daemon_rows(daemon: dict[str, Any], rss: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    if "not_measured" in daemon:
        reason = str(daemon["not_measured"])
        rows.append(Row("4a. daemon: drift → reported", DASH, reason, DASH, DASH, "p95 ≤ 1 s", "not measured"))
        rows.append(Row("4b. daemon: commit → applied", DASH, reason, DASH, DASH, "p95 ≤ 2 s", "not measured"))
    else:
        n = f"{int(daemon.get('objects', 0)):,}"
        for key, title, target in (
            ("detection_seconds", "4a. daemon: drift → reported", TARGETS["detect_p95"]),
            ("commit_seconds", "4b. daemon: commit → applied", TARGETS["commit_p95"]),
        ):
            rows.append(_latency_row(title, n, list(daemon.get(key) or []), target, daemon.get("notes") or []))
    if "not_measured" in rss:
        rows.append(Row("5. daemon peak RSS", DASH, str(rss["not_measured"]), DASH, DASH, "≤ 300 MB", "not measured"))
    else:
        n = f"{int(rss.get('objects', 0)):,}"
        peak = rss.get("peak_bytes")
        if peak is None:
            rows.append(
                Row(
                    "5. daemon peak RSS",
                    n,
                    "no figures",
                    DASH,
                    DASH,
                    "≤ 300 MB",
                    "ERROR",
                    "; ".join(rss.get("notes") or []),
                )
            )
        else:
            mb = peak / 1e6
            before = rss.get("peak_before_status_bytes")
            ours = f"{mb:.0f} MB" + (f" ({before / 1e6:.0f} MB before GET /status)" if before else "")
            ready = rss.get("ready_seconds")
            note = f"RSS at the end {rss.get('rss_bytes', 0) / 1e6:.0f} MB" + (
                f"; cold apply by the daemon took {ready:.0f} s" if ready else ""
            )
            rows.append(
                Row(
                    "5. daemon peak RSS",
                    n,
                    ours,
                    DASH,
                    DASH,
                    "≤ 300 MB",
                    "PASS" if mb <= TARGETS["rss_mb"] else "MISS",
                    note,
                )
            )
    return rows


def _latency_row(title: str, n: str, values: list[float | None], target: float, notes: list[str]) -> Row:
    """p50/p95 of latencies (None: never seen within the case's timeout), against a p95 target."""
    got = [v for v in values if v is not None]
    missed = len(values) - len(got)
    if not got:
        return Row(title, n, "no figures", DASH, DASH, f"p95 ≤ {target:g} s", "ERROR", "; ".join(notes) or "no samples")
    p50, p95 = _pct(got, 50), _pct(got, 95)
    ours = f"p50 {_s(p50)} / p95 {_s(p95)} ({len(values)} changes)"
    result = "ERROR" if missed else ("PASS" if p95 <= target else "MISS")
    note = f"{missed} change(s) never reported within 30 s" if missed else ""
    return Row(title, n, ours, DASH, DASH, f"p95 ≤ {target:g} s", result, note)


SCALE_TITLES = {
    "cold": "6a. scale: cold sync (1 run)",
    "noop": "6b. scale: no-op re-sync (1 run)",
    "drift": "6c. scale: drift report (10 drifted, 1 run)",
}


def scale_rows(scale: list[dict[str, Any]]) -> list[Row]:
    """Case 6 (bench/scale.py): the CLI rows as cases 1-3 (one run), then the daemon's at each size."""
    rows: list[Row] = []
    for res in scale:
        n = str(res["objects"])
        cli = {case: {n: {tool: [Measure(**m)] for tool, m in tools.items()}} for case, tools in res["cli"].items()}
        rows += case_rows(cli, SCALE_TITLES)
        daemon, detection = res.get("daemon"), res.get("detection")
        if daemon is None:
            continue
        nn = f"{int(n):,}"
        notes = list(daemon.get("notes") or []) + list((detection or {}).get("notes") or [])
        reported = _latency_row(
            "6d. scale: daemon drift → reported",
            nn,
            list((detection or {}).get("detection_seconds") or []),
            TARGETS["detect_p95"],
            notes,
        )
        corrected = [v for v in daemon.get("corrected_seconds") or [] if v is not None]
        if corrected:
            reported.note = "; ".join(
                x
                for x in (
                    reported.note,
                    f"self-heal, change → corrected: p50 {_s(_pct(corrected, 50))} / p95 {_s(_pct(corrected, 95))}",
                )
                if x
            )
        rows.append(reported)
        ready, passes = daemon.get("ready_seconds"), list(daemon.get("pass_seconds") or [])
        if ready is None or len(passes) < 2:
            rows.append(
                Row("6e. scale: daemon full pass", nn, "no figures", DASH, DASH, DASH, "ERROR", "; ".join(notes))
            )
        else:
            ours = f"start → ready {_s(ready)} (first pass {_s(passes[0])}); re-pass {_s(passes[-1])}"
            rows.append(Row("6e. scale: daemon full pass", nn, ours, DASH, DASH, DASH, DASH))
        peak, before = daemon.get("peak_bytes"), daemon.get("peak_before_status_bytes")
        if peak is None:
            rows.append(
                Row("6f. scale: daemon peak RSS", nn, "no figures", DASH, DASH, DASH, "ERROR", "; ".join(notes))
            )
        else:
            ours = f"{peak / 1e6:.0f} MB" + (f" ({before / 1e6:.0f} MB before GET /status)" if before else "")
            kb = peak / int(n) / 1e3
            result = "PASS" if kb <= TARGETS["daemon_kb"] else "MISS"
            target, per = f"≤ {TARGETS['daemon_kb']:g} kB per object", f"{kb:.1f} kB per object"
            rows.append(Row("6f. scale: daemon peak RSS", nn, ours, DASH, DASH, target, result, per))
        rows += _pairs_row(nn, list(res.get("cold_pairs") or []))
    return rows


def _pairs_row(nn: str, pairs: list[dict[str, float | None]]) -> list[Row]:
    """6g: the daemon's cold apply against the CLI's, as the ratio of the medians of alternating pairs."""
    if not pairs:
        return []
    cli = [float(c) for p in pairs if (c := p.get("cli_seconds")) is not None]
    run = [float(d) for p in pairs if (d := p.get("daemon_seconds")) is not None]
    title = f"6g. scale: cold apply, daemon vs CLI ({len(pairs)} alternating pairs)"
    target = f"≤ {TARGETS['daemon_cold']:g}{TIMES}"
    each = ", ".join(f"{_s(p['daemon_seconds'] or 0)} / {_s(p['cli_seconds'] or 0)}" for p in pairs)
    if len(cli) < len(pairs) or len(run) < len(pairs):
        return [Row(title, nn, "a run failed", DASH, DASH, target, "ERROR", f"daemon / CLI: {each}")]
    d, c = statistics.median(run), statistics.median(cli)
    ours = f"daemon start → ready {_s(d)} vs CLI {_s(c)} (medians)"
    result = "PASS" if d / c <= TARGETS["daemon_cold"] else "MISS"
    return [Row(title, nn, ours, DASH, f"{d / c:.2f}{TIMES}", target, result, f"each pair, daemon / CLI: {each}")]


def _pct(values: list[float], p: float) -> float:
    from bench.daemon import percentile

    return percentile(values, p)


def text_table(rows: list[Row]) -> str:
    head = ["case", "N", "gitops-sync", "kubectl", "ratio", "target", "result"]
    cells = [head] + [[r.case, r.n, r.ours, r.kubectl, r.ratio, r.target, r.result] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"  {r.case} (N={r.n}): {r.note}" for r in rows if r.note]
    return "\n".join(lines + (["", "notes:", *notes] if notes else []))


def markdown_table(rows: list[Row]) -> str:
    out = ["| case | N | gitops-sync | kubectl | ratio | target | result |", "|---|---:|---|---|---:|---|---|"]
    for r in rows:
        result = f"**{r.result}**" if r.result in ("MISS", "ERROR") else r.result
        out.append(f"| {r.case} | {r.n} | {r.ours} | {r.kubectl} | {r.ratio} | {r.target} | {result} |")
    return "\n".join(out)


def samples_table(cases: dict[str, dict[str, dict[str, list[Measure]]]]) -> str:
    out = [
        "| case | N | tool | seconds per run | server writes (audit) | dry runs (audit) | client requests "
        "(reads/writes/dry runs) |",
        "|---|---:|---|---|---|---|---|",
    ]
    for case in ("cold", "noop", "drift"):
        for n, tools in sorted(cases.get(case, {}).items(), key=lambda kv: int(kv[0])):
            for tool in (GITOPS_SYNC, KUBECTL, FLOOR):
                ms = tools.get(tool, [])
                if not ms:
                    continue
                secs = ", ".join(f"{m.seconds:.2f}" for m in ms)
                writes = ", ".join(DASH if m.server_writes is None else str(m.server_writes) for m in ms)
                dry = ", ".join(DASH if m.server_dry_runs is None else str(m.server_dry_runs) for m in ms)
                cr = ", ".join(
                    f"{m.client_requests.get('reads', 0)}/{m.client_requests.get('writes', 0)}/"
                    f"{m.client_requests.get('dry_runs', 0)}"
                    if m.client_requests
                    else DASH
                    for m in ms
                )
                out.append(f"| {case} | {int(n):,} | {tool} | {secs} | {writes} | {dry} | {cr} |")
    return "\n".join(out)


def kept_analysis(path: Path) -> str:
    try:
        text = path.read_text()
    except OSError:
        return ""
    m = re.search(re.escape(KEEP_START) + r".*?" + re.escape(KEEP_END), text, flags=re.S)
    return m.group(0) if m else ""


def markdown(
    doc: dict[str, Any], rows: list[Row], cases: dict[str, dict[str, dict[str, list[Measure]]]], previous: Path
) -> str:
    mach, ver, opts = doc["machine"], doc["versions"], doc["options"]
    analysis = kept_analysis(previous) or f"{KEEP_START}\n\n{KEEP_END}"
    sizes = ", ".join(f"{int(s):,}" for s in opts["sizes"])
    startup_repeats = opts.get("startup_repeats", "?")
    return f"""# Benchmarks: gitops-sync vs kubectl

Written by `make bench` (bench/run.py, options: {opts["argv"]}) on {doc["date"]}; the run took
{doc["duration_seconds"] / 60:.1f} min. Cases 1-3: medians of {opts["repeats"]} run(s) per size, ratio = gitops-sync
median ÷ kubectl median from the same run. Re-run `make bench` to refresh this file.
The fleet controller against Flux's own controllers (`make bench-fleet`):
[BENCHMARKS-fleet.md](BENCHMARKS-fleet.md).

- **Machine**: {mach["nproc"]} cores ({mach["cpu"]}), {mach["memory_gib"]} GiB, Linux {mach["kernel"]};
  load average at the start {mach["loadavg_at_start"]}. The API server, etcd, the controllers and the tool
  under test share these cores.
- **Versions**: gitops-sync {ver.get("gitops_sync", "?")}, Python {ver.get("python", "?")},
  kubectl {ver.get("kubectl", "?")}, Kubernetes server {ver.get("kubernetes_server", "?")}
  (deploy/local-cluster: etcd, kube-apiserver, controller-manager, scheduler, kwok).
- **Objects**: N = {sizes}, a third each of ConfigMaps, headless Services and Deployments (`replicas: 0`),
  100 per file (bench/workload.py). gitops-sync runs with its defaults (`--concurrency 8`).

## Results

{markdown_table(rows)}

{analysis}

## How each case is measured

0. **Start-up** (bench/startup.py, {startup_repeats} runs of each command, the tools taking turns, medians):
   (a) `gitops-sync --version` vs `kubectl version --client`; (b) `gitops-sync diff -o json` vs
   `kubectl diff --server-side` of one ConfigMap that is in sync, and the *Python floor* (bench/startup_floor.py:
   the same interpreter reading the same kubeconfig and sending kubectl's two requests with the standard
   library, no rendering, planning or report); (c) from just before the process starts to the API server's
   `requestReceivedTimestamp` of its first request (audit log; reads of the admin identity are audited on
   the local cluster). The package's bytecode is compiled first, as `pip install .` leaves it.
1. **Cold sync**: two fresh namespaces; `gitops-sync sync --repo DIR -n NS -o json` and
   `kubectl apply --server-side -n NS -f DIR`, each into its own, wall time of the whole command (process
   start to exit, as a user or a CI job sees it). The tools take turns going first; before every command the
   bench waits until the control plane's processes use < 0.15 of a core (max 20 s).
2. **No-op re-sync**: the same two commands again. Writes are counted server-side from the API server's
   audit log (every create/update/patch/delete, by user agent and namespace; dry runs counted apart), with
   `apiserver_request_total` as a cross-check. kubectl re-sends every object; gitops-sync must send none.
3. **Drift report**: 10 objects per namespace changed out of band (JSON patches under the field manager
   `bench-drift`: a ConfigMap value, a Service targetPort, a Deployment image), then `gitops-sync diff` vs
   `kubectl diff --server-side --force-conflicts -f DIR` (the drifted fields belong to `bench-drift` now, so
   without `--force-conflicts` kubectl diff stops at the first 409 and reports nothing). Both must find
   exactly the 10 objects.
- **÷ floor** rows (bench/floor.py): the API server's own share, measured in a third namespace. Cold: the
  same N server-side applies sent by a minimal client (urllib3, bodies encoded before the clock starts, no
  rendering or planning, the same concurrency as gitops-sync); no-op: one LIST per kind (the reads a no-op
  cannot avoid). Request time only, no process start-up; the ratio is gitops-sync's whole command ÷ that.
4. **Daemon** (`gitops-sync run`, local Git work tree): (a) `--detect-only` on objects already in sync; from
   just before an out-of-band PATCH to the daemon's `drift detected` log line for that object, over 50
   changes spread over the three kinds; (b) `--self-heal`; from just before rewriting a file and `git commit`
   to a GET returning the new ConfigMap value (polled every 20 ms). Nearest-rank percentiles.
5. **Daemon peak RSS**: the daemon started on an empty namespace applies the objects itself, watches them,
   corrects 10 drifts and serves `/status`; then the kernel's high-water mark (`VmHWM`) of its process.
   MB = 10^6 bytes.
6. **Scale** (bench/scale.py, N = {", ".join(f"{int(s):,}" for s in opts.get("scale_objects") or [])}): (a-c) cases
   1-3 at that size, one run each (kubectl's drift report alone takes minutes there), floors included; (d) the
   `--detect-only` daemon of 4a on those objects, {opts.get("scale_changes")} changes; `drift corrected` latencies
   of the self-heal daemon in the note; (e) a `--self-heal --resync 30` daemon started on an empty namespace:
   start → `/readyz` (the cold apply of every object), the seconds of its first full pass and of a steady-state
   full pass after the drifts, as it logs them; (f) that daemon's `VmHWM` after /status, and per object.

## Every run

{samples_table(cases)}
"""
