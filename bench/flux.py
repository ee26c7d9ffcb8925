"""Flux's own controllers as the peer of the fleet benchmark: source-controller and kustomize-controller, built
from their Go modules by deploy/local-cluster (`cluster.py build --with flux`) and run out of cluster.

Both run against the bench's private control plane with its admin kubeconfig (as gitops-sync does), leader
election off, metrics and health endpoints on free loopback ports; source-controller serves its artifacts
on loopback (`--storage-adv-addr`) for kustomize-controller to fetch. They are limited the way Flux's own
benchmark (fluxcd/flux-benchmark) limits them where it fits here: `--concurrent` 10 and 20, GOMAXPROCS 1 and 2
(their CPU limits), GOMEMLIMIT 1 GiB (their memory limits, which Flux's manifests pass to the Go runtime).
The objects (GitRepository + Kustomization per source) come from `source_objects`; bench/fleet_flux.py
drives the case and writes the figures.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.daemon import free_port
from bench.env import LAUNCHER, BenchCluster

GROUP_SOURCE = "source.toolkit.fluxcd.io/v1"
GROUP_KUSTOMIZE = "kustomize.toolkit.fluxcd.io/v1"
USER_AGENTS = ("source-controller", "kustomize-controller")  # the audit log's userAgent prefixes
# (name, --concurrent, GOMAXPROCS) as fluxcd/flux-benchmark runs them: 1 and 2 CPUs, concurrency 10 and 20
CONTROLLERS = (("source-controller", 10, 1), ("kustomize-controller", 20, 2))
MEMLIMIT = "1GiB"


def build(cache_dir: Path | None = None) -> Path:
    """The bin dir holding both controllers, building them first when needed (tens of minutes cold)."""
    argv = [sys.executable, str(LAUNCHER)]
    if cache_dir is not None:
        argv += ["--cache-dir", str(cache_dir)]
    r = subprocess.run([*argv, "build", "--with", "flux"], stdout=subprocess.PIPE, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"bench: cluster.py build --with flux failed (exit {r.returncode}); see above")
    return Path(r.stdout.strip().splitlines()[-1])


def built(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / name, os.X_OK) for name, _, _ in CONTROLLERS) and any(
        crd_dir(bin_dir).glob("*.yaml")
    )


def crd_dir(bin_dir: Path) -> Path:
    return bin_dir.parent / "flux" / "crds"  # cluster.py flux_crd_dir(<cache>)


def versions() -> dict[str, str]:
    """The versions cluster.py builds (its FLUX table), read without importing the launcher."""
    text = LAUNCHER.read_text()
    out = dict(re.findall(r'"(\w+-controller)": \("[^"]+", "(v[^"]+)"\)', text))
    m = re.search(r'^FLUX_VERSION = "(v[^"]+)"', text, re.M)
    out["flux"] = m.group(1) if m else "?"
    return out


def install_crds(cluster: BenchCluster, bin_dir: Path) -> None:
    files = sorted(crd_dir(bin_dir).glob("*.yaml"))
    args = [a for f in files for a in ("-f", str(f))]
    cluster.run_kubectl("apply", "--server-side", "--force-conflicts", *args)
    cluster.run_kubectl(
        "wait",
        "--for=condition=Established",
        "crd/gitrepositories.source.toolkit.fluxcd.io",
        "crd/kustomizations.kustomize.toolkit.fluxcd.io",
        "--timeout=60s",
    )


@dataclass
class Controller:
    name: str
    proc: subprocess.Popen[bytes]
    health: int
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


class FluxPeer:
    """Both controllers as child processes; `pids` for the samplers, `stop` ends them (TERM, then KILL)."""

    def __init__(self, cluster: BenchCluster, bin_dir: Path, work: Path) -> None:
        self.controllers: list[Controller] = []
        storage = work / "flux-storage"
        storage.mkdir(parents=True, exist_ok=True)
        storage_port = free_port()
        for name, concurrent, procs in CONTROLLERS:
            health, metrics = free_port(), free_port()
            argv = [
                str(bin_dir / name),
                f"--metrics-addr=127.0.0.1:{metrics}",
                f"--health-addr=127.0.0.1:{health}",
                f"--concurrent={concurrent}",
                "--watch-all-namespaces=true",
                "--log-level=info",
                "--log-encoding=json",
            ]
            if name == "source-controller":
                argv += [
                    f"--storage-path={storage}",
                    f"--storage-addr=127.0.0.1:{storage_port}",
                    f"--storage-adv-addr=127.0.0.1:{storage_port}",
                ]
            env = dict(cluster.env, GOMAXPROCS=str(procs), GOMEMLIMIT=MEMLIMIT, RUNTIME_NAMESPACE="flux-system")
            out = (work / f"{name}.log").open("ab")
            proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
            out.close()
            self.controllers.append(Controller(name, proc, health, argv, env))
        self.log_dir = work

    @property
    def pids(self) -> list[int]:
        return [c.proc.pid for c in self.controllers]

    def flags(self) -> dict[str, str]:
        """Each controller's flags and limits as run (paths and ports left out), for the report."""
        out = {}
        for c in self.controllers:
            kept = [a for a in c.argv[1:] if not a.startswith(("--kubeconfig", "--storage-path"))]
            kept = [re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", a) for a in kept]
            out[c.name] = " ".join(kept) + f" (GOMAXPROCS={c.env['GOMAXPROCS']}, GOMEMLIMIT={MEMLIMIT})"
        return out

    def wait_ready(self, timeout: float = 120) -> float:
        t0 = time.monotonic()
        for c in self.controllers:
            while True:
                if c.proc.poll() is not None:
                    raise SystemExit(
                        f"bench: {c.name} exited ({c.proc.returncode}); log: {self.log_dir / (c.name + '.log')}"
                    )
                with (
                    contextlib.suppress(urllib.error.URLError, OSError),
                    urllib.request.urlopen(f"http://127.0.0.1:{c.health}/readyz", timeout=2) as r,
                ):
                    if r.status == 200:
                        break
                if time.monotonic() - t0 > timeout:
                    raise SystemExit(f"bench: {c.name} not ready after {timeout:.0f} s")
                time.sleep(0.2)
        return time.monotonic() - t0

    def stop(self) -> None:
        for c in self.controllers:
            if c.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(c.proc.pid, signal.SIGTERM)
        for c in self.controllers:
            try:
                c.proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(c.proc.pid, signal.SIGKILL)
                c.proc.wait(5)


def source_objects(name: str, namespace: str, url: str, interval: str) -> list[dict[str, Any]]:
    """One source as Flux users write it: a GitRepository and a Kustomization applying its root directory
    into `namespace` (no prune, no wait, no health checks: what a GitSync does by default)."""
    return [
        {
            "apiVersion": GROUP_SOURCE,
            "kind": "GitRepository",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"url": url, "interval": interval, "ref": {"branch": "main"}},
        },
        {
            "apiVersion": GROUP_KUSTOMIZE,
            "kind": "Kustomization",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "interval": interval,
                "sourceRef": {"kind": "GitRepository", "name": name},
                "path": "./",
                "prune": False,
                "targetNamespace": namespace,
            },
        },
    ]
