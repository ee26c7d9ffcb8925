"""Cases 1-3: cold sync, no-op re-sync and drift report, gitops-sync and kubectl side by side.

Each repeat gets two fresh namespaces (one per tool). The tools take turns going first (even repeats
gitops-sync, odd repeats kubectl), and the control plane is left to settle before every command, so
neither tool pays for the controllers still digesting the other's objects.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.env import AuditCounter, BenchCluster, MetricsCounter, log, settle
from bench.floor import FLOOR, cold_floor, noop_floor
from bench.workload import apply_drift, client, create_namespace, delete_namespaces, drift_set

GITOPS_SYNC = "gitops-sync"
KUBECTL = "kubectl"
INVENTORY = "bench"
DRIFTED = 10


@dataclass
class Measure:
    """One timed command and what the server saw of it."""

    seconds: float
    exit_code: int
    ok: bool
    server_writes: int | None = None  # audit log (or None when there is no log)
    server_dry_runs: int | None = None
    metrics_writes: float | None = None  # apiserver_request_total delta (cluster-wide cross-check)
    client_requests: dict[str, int] = field(default_factory=dict)  # reads/writes/dry_runs by its user agent (audit)
    found: int | None = None  # objects reported as differing (drift case)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Tools:
    cluster: BenchCluster
    gitops_sync: list[str]  # argv prefix that runs the CLI
    concurrency: int | None = None

    def gitops(self, command: str, directory: Path, namespace: str) -> list[str]:
        argv = [
            *self.gitops_sync,  # its default log level, as a user runs it (requests are counted by the audit log)
            command,
            "--repo",
            str(directory),
            "-n",
            namespace,
            "--name",
            INVENTORY,
            "-o",
            "json",
        ]
        if self.concurrency:
            argv += ["--concurrency", str(self.concurrency)]
        return argv

    def kubectl(self, command: str, directory: Path, namespace: str) -> list[str]:
        argv = [self.cluster.kubectl, command, "--server-side", "-n", namespace, "-f", str(directory)]
        if command == "diff":
            # A field changed out of band belongs to another manager now: without --force-conflicts kubectl
            # diff stops at the first 409 and shows nothing. gitops-sync reports those as conflicts.
            argv.append("--force-conflicts")
        return argv


class Runner:
    def __init__(self, tools: Tools, workdir: Path) -> None:
        self.tools = tools
        self.cluster = tools.cluster
        self.workdir = workdir
        audit = self.cluster.audit_log
        self.audit = AuditCounter(audit) if audit else None
        self.metrics = MetricsCounter(self.cluster)
        self.client = client(self.cluster)

    def close(self) -> None:
        self.client.close()

    def timed(
        self,
        tool: str,
        argv: list[str],
        namespace: str,
        check: Callable[[subprocess.CompletedProcess[str]], tuple[bool, str, int | None]],
        env: dict[str, str] | None = None,
    ) -> Measure:
        settle(self.cluster)
        mark = self.audit.mark() if self.audit else None
        metrics_before = self.metrics.snapshot()
        t0 = time.perf_counter()
        env = env or self.cluster.env
        r = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=3600)
        seconds = time.perf_counter() - t0
        ok, note, found = check(r)
        m = Measure(seconds=seconds, exit_code=r.returncode, ok=ok, found=found, note=note)
        if self.audit and mark:
            ua = "kubectl/" if tool == KUBECTL else "gitops-sync/"
            count = self.audit.count(mark, ua, [namespace])
            m.server_writes, m.server_dry_runs = count.writes, count.dry_runs
            m.client_requests = {"reads": count.reads, "writes": count.writes, "dry_runs": count.dry_runs}
        metrics_after = self.metrics.snapshot()
        if metrics_before is not None and metrics_after is not None:
            m.metrics_writes = metrics_after - metrics_before
        if not ok:
            log(f"  {tool}: {note} (exit {r.returncode}); stderr tail: {r.stderr.strip()[-600:]}")
        return m

    def run_repeat(self, directory: Path, n: int, repeat: int) -> dict[str, dict[str, Measure]]:
        """Cases 1-3 for one size, one repeat: {case: {tool: Measure}}."""
        tag = uuid.uuid4().hex[:5]
        ns = {
            GITOPS_SYNC: f"bench-gs-{n}-{repeat}-{tag}",
            KUBECTL: f"bench-kc-{n}-{repeat}-{tag}",
            FLOOR: f"bench-fl-{n}-{repeat}-{tag}",
        }
        order = [GITOPS_SYNC, KUBECTL] if repeat % 2 == 0 else [KUBECTL, GITOPS_SYNC]
        out: dict[str, dict[str, Measure]] = {"cold": {}, "noop": {}, "drift": {}}
        for name in ns.values():
            create_namespace(self.client, name)
        try:
            for tool in order:
                out["cold"][tool] = self.cold(tool, directory, ns[tool], n)
                log(f"  N={n} #{repeat + 1} cold    {tool:12s} {out['cold'][tool].seconds:7.2f} s")
            out["cold"][FLOOR] = self._floor(cold_floor(self.cluster, directory, ns[FLOOR], self._concurrency), n)
            log(f"  N={n} #{repeat + 1} cold    {FLOOR:12s} {out['cold'][FLOOR].seconds:7.2f} s")
            for tool in order:
                out["noop"][tool] = self._noop(tool, directory, ns[tool], n)
                m = out["noop"][tool]
                log(f"  N={n} #{repeat + 1} no-op   {tool:12s} {m.seconds:7.2f} s, server writes {m.server_writes}")
            out["noop"][FLOOR] = self._floor(noop_floor(self.cluster, ns[FLOOR]), n)
            log(f"  N={n} #{repeat + 1} no-op   {FLOOR:12s} {out['noop'][FLOOR].seconds:7.2f} s")
            drifts = drift_set(n, DRIFTED)
            for tool in order:
                for d in drifts:
                    apply_drift(self.client, ns[tool], d)
            for tool in order:
                out["drift"][tool] = self._drift(tool, directory, ns[tool], len(drifts))
                m = out["drift"][tool]
                log(f"  N={n} #{repeat + 1} drift   {tool:12s} {m.seconds:7.2f} s, found {m.found}")
        finally:
            delete_namespaces(self.cluster, list(ns.values()))
        return out

    # -- the cases ------------------------------------------------------------------------------------

    @property
    def _concurrency(self) -> int:
        return self.tools.concurrency or 8  # gitops-sync's default --concurrency

    @staticmethod
    def _floor(got: dict[str, Any], n: int) -> Measure:
        ok = got["failed"] == 0 and got["objects"] == n
        note = "" if ok else f"{got['failed']} request(s) failed, {got['objects']} of {n} objects"
        return Measure(seconds=got["seconds"], exit_code=0 if ok else 1, ok=ok, note=note)

    def cold(self, tool: str, directory: Path, namespace: str, n: int) -> Measure:
        if tool == GITOPS_SYNC:
            return self.timed(
                tool,
                self.tools.gitops("sync", directory, namespace),
                namespace,
                lambda r: _gitops_summary_check(r, {"create": n}, exit_codes=(0,)),
            )
        return self.timed(
            tool,
            self.tools.kubectl("apply", directory, namespace),
            namespace,
            lambda r: _kubectl_apply_check(r, n, "serverside-applied"),
        )

    def _noop(self, tool: str, directory: Path, namespace: str, n: int) -> Measure:
        if tool == GITOPS_SYNC:
            return self.timed(
                tool,
                self.tools.gitops("sync", directory, namespace),
                namespace,
                lambda r: _gitops_summary_check(r, {"unchanged": n}, exit_codes=(0,)),
            )
        return self.timed(
            tool,
            self.tools.kubectl("apply", directory, namespace),
            namespace,
            lambda r: _kubectl_apply_check(r, n, "serverside-applied"),
        )

    def _drift(self, tool: str, directory: Path, namespace: str, drifted: int) -> Measure:
        if tool == GITOPS_SYNC:

            def check(r: subprocess.CompletedProcess[str]) -> tuple[bool, str, int | None]:
                summary = _summary(r.stdout)
                if summary is None:
                    return False, "no JSON report", None
                found = summary.get("update", 0) + summary.get("conflict", 0)
                ok = r.returncode == 1 and found == drifted and not summary.get("error")
                return ok, "" if ok else f"expected {drifted} drifted objects, report says {summary}", found

            return self.timed(tool, self.tools.gitops("diff", directory, namespace), namespace, check)

        def kcheck(r: subprocess.CompletedProcess[str]) -> tuple[bool, str, int | None]:
            found = len(re.findall(r"^diff -u -N ", r.stdout, flags=re.M))
            ok = r.returncode == 1 and found == drifted
            return ok, "" if ok else f"expected {drifted} drifted objects, kubectl diff showed {found}", found

        return self.timed(tool, self.tools.kubectl("diff", directory, namespace), namespace, kcheck)


def _summary(stdout: str) -> dict[str, int] | None:
    try:
        doc = json.loads(stdout)
    except ValueError:
        return None
    summary = doc.get("summary") if isinstance(doc, dict) else None
    return summary if isinstance(summary, dict) else None


def _gitops_summary_check(
    r: subprocess.CompletedProcess[str], expect: dict[str, int], exit_codes: tuple[int, ...]
) -> tuple[bool, str, int | None]:
    summary = _summary(r.stdout)
    if summary is None:
        return False, "no JSON report", None
    ok = r.returncode in exit_codes and all(summary.get(k) == v for k, v in expect.items())
    return ok, "" if ok else f"expected {expect}, report says {summary}", None


def _kubectl_apply_check(r: subprocess.CompletedProcess[str], n: int, word: str) -> tuple[bool, str, int | None]:
    applied = len(re.findall(rf" {word}$", r.stdout, flags=re.M))
    ok = r.returncode == 0 and applied == n
    return ok, "" if ok else f"kubectl applied {applied} of {n}", None
