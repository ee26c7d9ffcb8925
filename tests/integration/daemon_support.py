"""Helpers for the daemon's integration tests: a daemon subprocess, a Git work tree, timing, API server restarts."""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import git
import pytest
import yaml

if TYPE_CHECKING:
    from tests.conftest import KubeCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = REPO_ROOT / "deploy" / "local-cluster" / "cluster.py"
DEPLOY = REPO_ROOT / "deploy" / "kubernetes"
BASE_NS = "gitops-sync"  # the namespace deploy/kubernetes installs into
ACTOR = git.Actor("Test", "test@example.invalid")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.02) -> float:
    """Poll `check` until truthy; returns the seconds it took; fails the test after `timeout`."""
    t0 = time.monotonic()
    while True:
        if check():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)


def wait_established(env: dict[str, str], crd: str, timeout: float = 60) -> float:
    """Wait until the CRD named `crd` is Established (kubectl and the cluster from `env`). Not `kubectl wait
    --for=condition=Established`: a CRD created a moment ago has no status.conditions yet, and kubectl wait then
    fails at once (".status.conditions accessor error: <nil> is of the type <nil>") instead of waiting; seen
    with the reliability suite on four workers."""
    query = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'

    def established() -> bool:
        cmd = ["kubectl", "get", f"customresourcedefinition/{crd}", "-o", query]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, check=False)
        return r.returncode == 0 and r.stdout.strip() == "True"

    return wait_until(f"CRD {crd} Established", established, timeout, 0.2)


class GitRepo:
    """A local work tree the daemon watches."""

    def __init__(self, path: Path, files: dict[str, str]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.repo = git.Repo.init(path, initial_branch="main")
        self.commit(files, "initial")

    def commit(self, files: dict[str, str | None], message: str = "change") -> str:
        """Write (or delete, with None) files, stage everything, commit; returns the SHA."""
        for name, text in files.items():
            target = self.path / name
            if text is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.repo.git.add("--all")
        return self.repo.index.commit(message, author=ACTOR, committer=ACTOR).hexsha


def deployment(name: str, replicas: int, image: str = "registry.invalid/web:1.0") -> str:
    return (
        json.dumps(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "labels": {"app": name}},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "web", "image": image}]},
                    },
                },
            }
        )
        + "\n"
    )


def sync_once(env: dict[str, str], repo: Path, namespace: str, *args: str, timeout: float = 90) -> None:
    """`gitops-sync sync` of `repo` into `namespace` as a person would run it first (fails the test if it fails)."""
    r = subprocess.run(
        [sys.executable, "-m", "gitops_sync", "sync", "--repo", str(repo), "-n", namespace, *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def configmap(name: str, data: dict[str, str], namespace: str | None = None) -> str:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}) + "\n"


def token_kubeconfig(admin: Path, token: str, namespace: str, path: Path) -> Path:
    """A kubeconfig that is the user of `token`: the admin kubeconfig's server and CA, the token, `namespace`."""
    cluster = yaml.safe_load(admin.read_text())["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority-data")
    if not ca and cluster.get("certificate-authority"):
        ca_path = Path(cluster["certificate-authority"])
        ca_file = ca_path if ca_path.is_absolute() else admin.parent / ca_path
        ca = base64.b64encode(ca_file.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": cluster["server"], "certificate-authority-data": ca}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa", "namespace": namespace}}],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


class Daemon:
    """`python -m gitops_sync run ...` in a subprocess on a free port; stopped with SIGTERM.

    `module`: another entry point that runs the same CLI (a test's wrapper with a fault seam of its own)."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path, *, module: str = "gitops_sync") -> None:
        self.port = free_port()
        self.log_path = log_path
        self.args = [
            sys.executable,
            "-m",
            module,
            "run",
            "--http-addr",
            f"127.0.0.1:{self.port}",
            "--log-format",
            "json",
            *args,
        ]
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.args, env=env, cwd=REPO_ROOT, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )

    # -- HTTP -------------------------------------------------------------------------------

    def get(self, path: str, timeout: float = 5) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
                return int(r.status), r.read()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read()

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return int(r.status), r.read()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read()

    def status(self) -> dict[str, Any]:
        code, body = self.get("/status")
        assert code == 200, body
        doc: dict[str, Any] = json.loads(body)
        return doc

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample of /metrics (0 when absent)."""
        _, body = self.get("/metrics")
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in body.decode().splitlines():
            if line.startswith("#"):
                continue
            sample, _, value = line.rpartition(" ")
            metric, _, rest = sample.partition("{")
            got = ",".join(sorted(rest.rstrip("}").split(","))) if rest else ""
            if metric == name and got == want:
                return float(value)
        return 0.0

    def entry(self, kind: str, name: str) -> dict[str, Any] | None:
        for obj in self.status()["objects"]:
            if obj["kind"] == kind and obj["name"] == name:
                return dict(obj)
        return None

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"the daemon exited with {self.proc.returncode}:\n{self.log_tail()}")
        try:
            return self.get("/readyz", timeout=1)[0] == 200
        except OSError:
            return False

    def wait_ready(self, timeout: float = 30) -> float:
        return wait_until("the daemon to be ready", self.ready, timeout, interval=0.05)

    # -- logs -------------------------------------------------------------------------------

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
        return out

    def logged(self, event: str) -> list[dict[str, Any]]:
        return [d for d in self.log_lines() if d.get("event") == event]

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    # -- stopping ---------------------------------------------------------------------------

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM; returns the exit status (fails the test if it does not exit in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                pytest.fail(f"the daemon did not exit within {timeout} s of SIGTERM:\n{self.log_tail()}")
        self._log.close()
        return int(self.proc.returncode)

    def kill(self) -> None:
        """SIGKILL: a crash, no cleanup (the Lease is not released)."""
        self.proc.kill()
        self.proc.wait(5)
        self._log.close()

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()


# -- deploy/kubernetes as a test installs it -------------------------------------------------------------------


def rendered(kube: KubeCluster, variant: str) -> list[dict[str, Any]]:
    out = kube.kubectl("kustomize", str(DEPLOY / variant)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def relocate(docs: list[dict[str, Any]], ns: str, suffix: str) -> list[dict[str, Any]]:
    """Into namespace `ns`; cluster-scoped names get `suffix` so parallel sessions never share them."""
    out = []
    for d in docs:
        d = json.loads(json.dumps(d))
        meta = d["metadata"]
        if d["kind"] == "Namespace":
            continue
        if meta.get("namespace") == BASE_NS:
            meta["namespace"] = ns
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            meta["name"] += suffix
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            if d["roleRef"]["kind"] == "ClusterRole":
                d["roleRef"]["name"] += suffix
            for s in d["subjects"]:
                s["namespace"] = ns
        out.append(d)
    return out


def as_list(docs: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})


def kubectl_edit_env(env: dict[str, str], sed: str) -> dict[str, str]:
    """`kubectl edit` run by a script: KUBE_EDITOR is a sed expression applied to the edited file."""
    return {**env, "KUBE_EDITOR": f"sed -i -e '{sed}'"}


# -- the API server of a private cluster ---------------------------------------------------------------


def _launcher() -> ModuleType:
    spec = importlib.util.spec_from_file_location("local_cluster_launcher", LAUNCHER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("local_cluster_launcher", module)
    spec.loader.exec_module(module)
    return module


def restart_apiserver(state_dir: Path, down_for: float, *, ready_timeout: float = 60) -> None:
    """Stop the kube-apiserver of the cluster in `state_dir` (by its recorded pid), wait, start it again.

    Only for a cluster this test session started itself: the shared one serves other sessions.
    Uses the launcher's own functions, so the restarted server has exactly the original flags.
    """
    lc = _launcher()
    cfg = lc.make_config(
        argparse.Namespace(
            dir=str(state_dir),
            cache_dir=os.environ.get("LOCAL_CLUSTER_CACHE"),
            timeout=ready_timeout,
            command="restart",
        )
    )
    procs = [p for p in lc.read_pids(cfg) if p.name == "kube-apiserver"]
    assert procs, f"no kube-apiserver pid recorded in {cfg.pids}"
    lc.stop_together(procs, 15.0)
    time.sleep(down_for)
    lc.start(cfg, "kube-apiserver")
    api = lc.Api(cfg)
    wait_until("the API server to answer /readyz again", lambda: api.ok("/readyz"), ready_timeout, 0.2)


def start_private_cluster(state_dir: Path) -> dict[str, str]:
    """`cluster.py --dir state_dir up --auto-ports`; returns an env with KUBECONFIG and PATH set."""
    r = subprocess.run(
        [sys.executable, str(LAUNCHER), "--dir", str(state_dir), "up", "--auto-ports"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if r.returncode != 0:
        pytest.fail(f"cluster.py up failed ({r.returncode}):\n{r.stderr[-3000:]}")
    env = dict(os.environ)
    env["KUBECONFIG"] = str(state_dir / "kubeconfig")
    env["PATH"] = f"{state_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def stop_private_cluster(state_dir: Path) -> None:
    subprocess.run(
        [sys.executable, str(LAUNCHER), "--dir", str(state_dir), "down"], capture_output=True, check=False, timeout=120
    )


def sa_kubeconfig(kube: KubeCluster, ns: str, path: Path) -> Path:
    """A kubeconfig that is the ServiceAccount: the admin one's server and CA, the SA's bound token."""
    token = kube.kubectl("create", "token", "gitops-sync", "-n", ns, "--duration=1h").stdout.strip()
    return token_kubeconfig(kube.kubeconfig, token, ns, path)
