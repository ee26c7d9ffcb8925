"""The cluster the benchmarks run against, and what they observe of it.

- `BenchCluster.start` runs deploy/local-cluster/cluster.py in a state dir of its own (`--auto-ports`, so it
  never collides with another cluster on the machine); `BenchCluster.reuse` takes a running one by kubeconfig.
- `AuditCounter` counts write requests server-side from the API server's audit log (one JSON event per
  write, with the user agent, so kubectl's and gitops-sync's writes are told apart from the controllers').
- `MetricsCounter` reads `apiserver_request_total` as a cross-check (and as the count when there is no log).
- `settle` waits for the control plane to go idle between measurements (the controllers keep working after
  a large apply; their CPU is shared with the tool measured next).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LAUNCHER = REPO / "deploy" / "local-cluster" / "cluster.py"
READ_VERBS = frozenset({"get", "list"})
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
BENCH_USER_AGENT = "gitops-sync-bench"


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass
class BenchCluster:
    kubeconfig: Path
    bin_dir: Path
    state_dir: Path | None  # a cluster.py state dir (audit log, pids), when known
    started_here: bool
    env: dict[str, str] = field(repr=False, default_factory=dict)

    @property
    def kubectl(self) -> str:
        return str(self.bin_dir / "kubectl")

    @property
    def audit_log(self) -> Path | None:
        if self.state_dir is None:
            return None
        path = self.state_dir / "logs" / "audit.log"
        return path if path.is_file() else None

    def pids(self) -> list[int]:
        """The control plane's processes (from the launcher's pid files), for `settle`."""
        out: list[int] = []
        if self.state_dir is None:
            return out
        for f in sorted((self.state_dir / "pids").glob("*.pid")):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                out.append(int(json.loads(f.read_text())["pid"]))
        return [p for p in out if Path(f"/proc/{p}").exists()]

    @classmethod
    def start(cls, state_dir: Path | None) -> BenchCluster:
        if state_dir is None:
            state_dir = Path(tempfile.mkdtemp(prefix="gitops-sync-bench-"))
            state_dir.rmdir()  # the launcher creates it (and `down` removes it)
        log(f"starting the local control plane in {state_dir} (cluster.py up --auto-ports)")
        r = subprocess.run(
            [sys.executable, str(LAUNCHER), "--dir", str(state_dir), "up", "--auto-ports"],
            stdout=subprocess.PIPE,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            raise SystemExit(f"bench: cluster.py up failed (exit {r.returncode}); see its messages above")
        exports = dict(re.findall(r"^export (\w+)=(.*)$", r.stdout, flags=re.M))
        kubeconfig = Path(exports.get("KUBECONFIG", str(state_dir / "kubeconfig")))
        return cls._make(kubeconfig, state_dir / "bin", state_dir, started_here=True)

    @classmethod
    def reuse(cls, kubeconfig: Path) -> BenchCluster:
        kubeconfig = kubeconfig.resolve()
        state = kubeconfig.parent
        state_dir = state if (state / "logs").is_dir() or (state / "pids").is_dir() else None
        bin_dir = state / "bin"
        if not (bin_dir / "kubectl").exists():
            found = shutil.which("kubectl")
            if found:
                bin_dir = Path(found).parent
            else:  # the launcher prints its bin dir (building first if needed)
                r = subprocess.run(
                    [sys.executable, str(LAUNCHER), "build"], stdout=subprocess.PIPE, text=True, check=True
                )
                bin_dir = Path(r.stdout.strip().splitlines()[-1])
        return cls._make(kubeconfig, bin_dir, state_dir, started_here=False)

    @classmethod
    def _make(cls, kubeconfig: Path, bin_dir: Path, state_dir: Path | None, *, started_here: bool) -> BenchCluster:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(kubeconfig)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env.pop("GITOPS_SYNC_REPO", None)
        return cls(kubeconfig, bin_dir, state_dir, started_here, env)

    def stop(self) -> None:
        if not self.started_here or self.state_dir is None:
            return
        log(f"stopping the local control plane ({self.state_dir})")
        subprocess.run(
            [sys.executable, str(LAUNCHER), "--dir", str(self.state_dir), "down"],
            stdout=subprocess.DEVNULL,
            check=False,
        )

    def run_kubectl(
        self, *args: str, check: bool = True, timeout: float = 300, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [self.kubectl, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            check=False,
        )
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
        return r


# -- server-side write counts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Mark:
    size: int
    inode: int


@dataclass
class WriteCount:
    writes: int = 0
    dry_runs: int = 0
    by_verb: dict[str, int] = field(default_factory=dict)
    reads: int = 0  # get/list (discovery included) by the user agent, any namespace (admin identity only)


class AuditCounter:
    """Write requests per user agent and namespace, from the audit log between two marks."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> Mark:
        st = self.path.stat()
        return Mark(st.st_size, st.st_ino)

    def count(self, since: Mark, user_agent_prefix: str, namespaces: Sequence[str]) -> WriteCount:
        out = WriteCount()
        wanted = set(namespaces)
        for ev in self._events(since, user_agent_prefix):
            if ev.get("stage") != "ResponseComplete":
                continue
            if ev.get("verb") in READ_VERBS:
                out.reads += 1
                continue
            if ev.get("verb") not in WRITE_VERBS:
                continue
            if wanted and (ev.get("objectRef") or {}).get("namespace") not in wanted:
                continue
            if "dryRun=" in str(ev.get("requestURI", "")):
                out.dry_runs += 1
                continue
            out.writes += 1
            out.by_verb[ev["verb"]] = out.by_verb.get(ev["verb"], 0) + 1
        return out

    def first_request(self, since: Mark, user_agent_prefix: str) -> float | None:
        """When the API server received the first request of `user_agent_prefix` after `since` (epoch
        seconds), or None. Reads are audited for the admin identity only (deploy/local-cluster)."""
        first: float | None = None
        for ev in self._events(since, user_agent_prefix):
            with contextlib.suppress(KeyError, ValueError, TypeError):
                at = datetime.fromisoformat(ev["requestReceivedTimestamp"]).timestamp()
                first = at if first is None else min(first, at)
        return first

    def _events(self, since: Mark, user_agent_prefix: str) -> Iterator[dict[str, Any]]:
        """The audit events of `user_agent_prefix` after `since`, once the file has caught up."""
        self._wait_quiet()
        for line in self._lines_since(since):
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict) and str(ev.get("userAgent", "")).startswith(user_agent_prefix):
                yield ev

    def _wait_quiet(self, quiet: float = 0.3, limit: float = 3.0) -> None:
        """The API server writes the ResponseComplete event as the response leaves; let the file catch up."""
        deadline = time.monotonic() + limit
        last = -1
        while time.monotonic() < deadline:
            size = self.path.stat().st_size
            if size == last:
                return
            last = size
            time.sleep(quiet)

    def _lines_since(self, since: Mark) -> Iterator[bytes]:
        st = self.path.stat()
        if st.st_ino != since.inode:  # rotated meanwhile: the rest of the old file, then the new one
            for old in sorted(self.path.parent.glob("audit-*.log")):
                if old.stat().st_ino == since.inode:
                    with old.open("rb") as f:
                        f.seek(since.size)
                        yield from f
            start = 0
        else:
            start = since.size
        with self.path.open("rb") as f:
            f.seek(start)
            yield from f


_METRIC = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.e+]+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class MetricsCounter:
    """Non-dry-run writes to configmaps, services and deployments (no subresource) from /metrics.

    Cluster-wide, so it includes controllers: a cross-check on a settled cluster, not the primary count.
    """

    RESOURCES = frozenset({"configmaps", "services", "deployments"})
    VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})

    def __init__(self, cluster: BenchCluster) -> None:
        self.cluster = cluster

    def snapshot(self) -> float | None:
        r = self.cluster.run_kubectl("get", "--raw", "/metrics", check=False, timeout=60)
        if r.returncode != 0:
            return None
        total = 0.0
        for line in r.stdout.splitlines():
            m = _METRIC.match(line)
            if not m:
                continue
            labels = dict(_LABEL.findall(m.group("labels")))
            if (
                labels.get("verb") in self.VERBS
                and labels.get("resource") in self.RESOURCES
                and not labels.get("subresource")
                and not labels.get("dry_run")
            ):
                total += float(m.group("value"))
        return total


# -- settling -------------------------------------------------------------------------------------------


def _cpu_ticks(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime
    return total


def _system_busy() -> tuple[int, int]:
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return sum(parts) - idle, sum(parts)


def settle(cluster: BenchCluster, *, max_wait: float = 20.0, window: float = 0.5, threshold: float = 0.15) -> float:
    """Wait until the control plane uses less than `threshold` of one core (system-wide busy fraction when its
    processes are unknown); returns the seconds waited. Bounded: a busy machine costs at most `max_wait`."""
    hz = os.sysconf("SC_CLK_TCK")
    pids = cluster.pids()
    start = time.monotonic()
    while time.monotonic() - start < max_wait:
        if pids:
            before = _cpu_ticks(pids)
            time.sleep(window)
            cores = (_cpu_ticks(pids) - before) / hz / window
        else:
            b0, t0 = _system_busy()
            time.sleep(window)
            b1, t1 = _system_busy()
            cores = (b1 - b0) / max(1, t1 - t0) * (os.cpu_count() or 1)
        if cores < threshold:
            break
    return time.monotonic() - start


# -- machine and versions ----------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    load = ""
    with contextlib.suppress(OSError):
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return {
        "nproc": os.cpu_count() or 0,
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "cpu": cpu,
        "kernel": platform.release(),
        "loadavg_at_start": load,
    }


def cli_version(output: str) -> str:
    """The release from `gitops-sync --version` ("gitops-sync, version 0.1.0 (commit …)"): the commit is named
    apart, from the work tree the bench measures."""
    m = re.search(r"version (\S+)", output)
    return m.group(1) if m else "?"


def versions(cluster: BenchCluster, python: str) -> dict[str, str]:
    out: dict[str, str] = {"python": platform.python_version()}
    r = cluster.run_kubectl("version", "-o", "json", check=False, timeout=30)
    with contextlib.suppress(ValueError):
        doc = json.loads(r.stdout or "{}")
        out["kubectl"] = str((doc.get("clientVersion") or {}).get("gitVersion", "?"))
        out["kubernetes_server"] = str((doc.get("serverVersion") or {}).get("gitVersion", "?"))
    g = subprocess.run(
        [python, "-m", "gitops_sync", "--version"], capture_output=True, text=True, check=False, cwd=REPO
    )
    version = cli_version(g.stdout)
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    # The code measured is the work tree's: name what differs from the commit (shared trees move).
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "gitops_sync"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split("\n")
    changed = sorted(line[3:].strip() for line in dirty if line.strip())
    out["gitops_sync"] = f"{version} (commit {head or '?'}" + (
        f"; uncommitted changes in {', '.join(changed)})" if changed else ")"
    )
    return out
