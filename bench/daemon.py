"""Cases 4 and 5: the daemon (`gitops-sync run`) against the local control plane.

4a. Drift detection: the daemon runs `--detect-only` over N objects already in sync; the bench changes one
    object out of band (a JSON patch under another field manager) and times from just before that request
    until the daemon's `drift detected` log line for the object reaches the bench (stderr, JSON lines).
4b. Commit to applied (local path): the daemon runs `--self-heal` on a Git work tree; the bench rewrites one
    file (a ConfigMap value), commits, and times from before the write until a GET of the object returns
    the new value (polled every 20 ms).
5.  Peak RSS: the daemon, started on an empty namespace, applies and then watches N_rss objects; the bench
    reads the kernel's high-water mark (VmHWM) of the process once it is ready and has corrected drift, and
    again after one GET /status (the document of every object and its field history).
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.env import BenchCluster, log, settle
from bench.workload import (
    apply_drift,
    client,
    create_namespace,
    delete_namespaces,
    drift_for,
    generate,
    git_commit,
    git_init,
    head,
    write_file,
)
from gitops_sync.cluster.client import Client

DAEMON_INVENTORY = "bench-daemon"


def available(gitops_sync: list[str], env: dict[str, str]) -> bool:
    r = subprocess.run(
        [*gitops_sync, "run", "--help"], env=env, capture_output=True, text=True, check=False, timeout=60
    )
    return r.returncode == 0


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100): a value that was actually measured."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DaemonProcess:
    """`gitops-sync run` as a child process; its JSON log lines are collected with their arrival time."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.argv = [*argv, "--http-addr", f"127.0.0.1:{self.port}", "--log-format", "json", "--log-level", "info"]
        self.log_path = log_path
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            self.argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with self.log_path.open("a") as out:
            for line in self.proc.stderr:
                now = time.monotonic()
                out.write(line)
                try:
                    ev = json.loads(line)
                except ValueError:
                    ev = {"event": line.rstrip()}
                if not isinstance(ev, dict):
                    ev = {"event": str(ev)}
                with self._cond:
                    self.lines.append((now, ev))
                    self._cond.notify_all()

    def wait_event(self, start: int, match: Callable[[dict[str, Any]], bool], timeout: float) -> float | None:
        """Arrival time of the first log event at index >= start that matches, or None after `timeout`."""
        deadline = time.monotonic() + timeout
        index = start
        with self._cond:
            while True:
                while index < len(self.lines):
                    t, ev = self.lines[index]
                    index += 1
                    if match(ev):
                        return t
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return None
                self._cond.wait(left)

    def mark(self) -> int:
        with self._cond:
            return len(self.lines)

    def get(self, path: str, timeout: float = 10) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()
        except (urllib.error.URLError, OSError):
            return 0, b""

    def wait_ready(self, timeout: float) -> float | None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                return None
            code, _ = self.get("/readyz", timeout=5)
            if code == 200:
                return time.monotonic() - t0
            time.sleep(0.2)
        return None

    def status(self) -> dict[str, Any]:
        code, body = self.get("/status", timeout=60)
        if code != 200:
            return {}
        try:
            doc = json.loads(body)
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}

    def memory(self) -> dict[str, int]:
        """VmHWM (peak) and VmRSS (now), in bytes."""
        out: dict[str, int] = {}
        try:
            text = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return out
        for line in text.splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(rest.split()[0]) * 1024
        return out

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(5)
        return self.proc.returncode


@dataclass
class DaemonResults:
    detection: list[float | None] = field(default_factory=list)
    commit: list[float | None] = field(default_factory=list)
    objects: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "detection_seconds": self.detection,
            "commit_seconds": self.commit,
            "notes": self.notes,
        }


def _object_is(namespace: str, name: str) -> Callable[[dict[str, Any]], bool]:
    suffix = f"/{namespace}/{name}"

    def match(ev: dict[str, Any]) -> bool:
        return ev.get("event") == "drift detected" and str(ev.get("object", "")).endswith(suffix)

    return match


def _corrected(namespace: str, name: str) -> Callable[[dict[str, Any]], bool]:
    suffix = f"/{namespace}/{name}"

    def match(ev: dict[str, Any]) -> bool:
        return ev.get("event") == "drift corrected" and str(ev.get("object", "")).endswith(suffix)

    return match


def _spread(n: int, count: int) -> list[int]:
    """`count` distinct object numbers over 0..n-1 whose kinds cycle ConfigMap, Service, Deployment."""
    step = n // count
    if step < 3:
        return list(range(min(n, count)))
    return [(k * step // 3) * 3 + k % 3 for k in range(count)]


def latency_cases(
    cluster: BenchCluster, gitops_sync: list[str], workdir: Path, n: int, changes: int, commits: int
) -> DaemonResults:
    res = DaemonResults(objects=n)
    directory = generate(workdir / f"daemon-{n}", n)
    git_init(directory)
    namespace = f"bench-dm-{n}-{uuid.uuid4().hex[:5]}"
    c = client(cluster)
    create_namespace(c, namespace)
    base = ["--repo", str(directory), "-n", namespace, "--name", DAEMON_INVENTORY]
    try:
        log(f"case 4: pre-syncing {n} objects into {namespace}")
        subprocess.run(
            [*gitops_sync, "sync", *base, "-o", "json"], env=cluster.env, capture_output=True, check=True, timeout=1800
        )
        settle(cluster)
        detection(cluster, gitops_sync, workdir, c, base, namespace, n, changes, res)
        settle(cluster)
        _commit_to_applied(cluster, gitops_sync, workdir, c, base, directory, namespace, n, commits, res)
    finally:
        c.close()
        delete_namespaces(cluster, [namespace])
    return res


def detection(
    cluster: BenchCluster,
    gitops_sync: list[str],
    workdir: Path,
    c: Client,
    base: list[str],
    namespace: str,
    n: int,
    changes: int,
    res: DaemonResults,
) -> None:
    d = DaemonProcess([*gitops_sync, "run", *base, "--detect-only"], cluster.env, workdir / "daemon-detect.log")
    try:
        ready = d.wait_ready(300)
        if ready is None:
            res.notes.append(f"detect-only daemon never became ready (exit {d.proc.poll()}); see {d.log_path}")
            return
        log(f"case 4a: daemon ready after {ready:.1f} s; {changes} out-of-band changes")
        for k, i in enumerate(_spread(n, changes)):
            drift = drift_for(i, f"oob-{k}-{uuid.uuid4().hex[:4]}")
            start = d.mark()
            t0 = time.monotonic()
            apply_drift(c, namespace, drift)
            t = d.wait_event(start, _object_is(namespace, drift.name), timeout=30)
            res.detection.append(None if t is None else t - t0)
            time.sleep(0.1)  # the next change is a new event, not part of this one's debounce
    finally:
        d.stop()


def _commit_to_applied(
    cluster: BenchCluster,
    gitops_sync: list[str],
    workdir: Path,
    c: Client,
    base: list[str],
    directory: Path,
    namespace: str,
    n: int,
    commits: int,
    res: DaemonResults,
) -> None:
    d = DaemonProcess([*gitops_sync, "run", *base, "--self-heal"], cluster.env, workdir / "daemon-commit.log")
    path = f"/api/v1/namespaces/{namespace}/configmaps/cm-0"
    try:
        ready = d.wait_ready(300)
        if ready is None:
            res.notes.append(f"self-heal daemon never became ready (exit {d.proc.poll()}); see {d.log_path}")
            return
        _converged(d, head(directory), timeout=120)
        log(f"case 4b: daemon ready after {ready:.1f} s; {commits} commits")
        for k in range(commits):
            value = f"commit-{k}-{uuid.uuid4().hex[:4]}"
            t0 = time.monotonic()
            write_file(directory, 0, n, overrides={0: value})
            git_commit(directory, f"bench: cm-0 = {value}")
            latency: float | None = None
            while time.monotonic() - t0 < 60:
                obj = c.get_or_none(path) or {}
                if (obj.get("data") or {}).get("key") == value:
                    latency = time.monotonic() - t0
                    break
                time.sleep(0.02)
            res.commit.append(latency)
            _converged(d, head(directory), timeout=60)  # the commit's own pass, before the next commit
    finally:
        d.stop()


def _converged(d: DaemonProcess, revision: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = d.status().get("daemon") or {}
        if st.get("appliedRevision") == revision and not st.get("queueDepth"):
            return True
        time.sleep(0.25)
    return False


@dataclass
class RssResult:
    objects: int
    peak_bytes: int | None = None
    rss_bytes: int | None = None
    peak_before_status_bytes: int | None = None  # before the first /status request (a 10k-object document)
    ready_seconds: float | None = None
    corrected_seconds: list[float | None] = field(default_factory=list)  # out-of-band change → `drift corrected`
    pass_seconds: list[float] = field(default_factory=list)  # every full pass, as the daemon logged it
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "peak_bytes": self.peak_bytes,
            "rss_bytes": self.rss_bytes,
            "peak_before_status_bytes": self.peak_before_status_bytes,
            "ready_seconds": self.ready_seconds,
            "corrected_seconds": self.corrected_seconds,
            "pass_seconds": self.pass_seconds,
            "notes": self.notes,
        }


def _self_heal(gitops_sync: list[str], directory: Path, namespace: str, resync: float | None) -> list[str]:
    """The daemon of cases 5 and 6: `run --self-heal` on the workload's directory, one namespace."""
    extra = ["--resync", f"{resync:g}"] if resync else []
    repo = ["--repo", str(directory), "-n", namespace, "--name", DAEMON_INVENTORY]
    return [*gitops_sync, "run", *repo, "--self-heal", *extra]


def cold_start(
    cluster: BenchCluster, gitops_sync: list[str], workdir: Path, directory: Path, namespace: str
) -> float | None:
    """Case 6g's daemon: seconds from its start to /readyz on an empty `namespace` (the cold apply), then stopped;
    None when it never became ready."""
    settle(cluster)
    d = DaemonProcess(_self_heal(gitops_sync, directory, namespace, None), cluster.env, workdir / f"{namespace}.log")
    try:
        return d.wait_ready(1800)
    finally:
        d.stop()


def _full_pass(ev: dict[str, Any]) -> bool:
    return ev.get("event") == "pass" and ev.get("kind") == "full"


def rss_case(
    cluster: BenchCluster,
    gitops_sync: list[str],
    workdir: Path,
    n: int,
    *,
    changes: int = 10,
    resync: float | None = None,
    directory: Path | None = None,
    then: Callable[[Client, str], None] | None = None,
) -> RssResult:
    """Case 5 (and case 6's daemon at scale): with `resync`, the daemon also runs a full pass every `resync`
    seconds and the bench waits for one after the drifts (the steady-state re-pass); `then(client, namespace)`
    runs once the daemon has stopped, on the namespace it left in sync, before the namespace is deleted."""
    res = RssResult(objects=n)
    directory = directory or generate(workdir / f"rss-{n}", n)
    namespace = f"bench-rss-{n}-{uuid.uuid4().hex[:5]}"
    c = client(cluster)
    create_namespace(c, namespace)
    settle(cluster)
    log(f"daemon applying and managing {n} objects in {namespace}")
    argv = _self_heal(gitops_sync, directory, namespace, resync)
    d = DaemonProcess(argv, cluster.env, workdir / f"daemon-rss-{n}.log")
    try:
        ready = d.wait_ready(1800)
        if ready is None:
            res.notes.append(f"daemon never became ready (exit {d.proc.poll()}); see {d.log_path}")
            return res
        res.ready_seconds = ready
        log(f"ready after {ready:.1f} s (cold apply of {n} objects); drifting {changes} and waiting for the fix")
        for k, i in enumerate(_spread(n, changes)):
            drift = drift_for(i, f"rss-{k}")
            start = d.mark()
            t0 = time.monotonic()
            apply_drift(c, namespace, drift)
            t = d.wait_event(start, _corrected(namespace, drift.name), timeout=30)
            res.corrected_seconds.append(None if t is None else t - t0)
            time.sleep(0.1)  # the next change is a new event, not part of this one's debounce
        if resync:
            log(f"waiting for the next full pass (--resync {resync:g})")
            if d.wait_event(d.mark(), _full_pass, timeout=resync * 2 + 600) is None:
                res.notes.append(f"no full pass within {resync * 2 + 600:.0f} s after the drifts")
        res.peak_before_status_bytes = d.memory().get("VmHWM")
        d.status()  # the /status document of every object is part of what the daemon serves
        mem = d.memory()
        res.peak_bytes, res.rss_bytes = mem.get("VmHWM"), mem.get("VmRSS")
        res.pass_seconds = [float(ev["seconds"]) for _t, ev in d.lines if _full_pass(ev) and "seconds" in ev]
    finally:
        d.stop()
        try:
            if then is not None and res.ready_seconds is not None:
                then(c, namespace)
        finally:
            c.close()
            delete_namespaces(cluster, [namespace], timeout=900)
    return res
