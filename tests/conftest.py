"""Shared pytest fixtures.

Cluster fixtures (deploy/local-cluster): `kube` (session) gives a real control plane, `namespace` (function) a
fresh namespace in it; `second_kube` (session) a second control plane side by side, always started here (for
many-cluster tests; one at a time on this machine). Tests using them are marked `@pytest.mark.cluster`. A
test reads the cluster's state with `kube.get` / `kube.find` / `kube.list` (gitops-sync's own Client, a few
milliseconds a look), and runs `kube.kubectl` where kubectl itself is what it tests, or is the actor (an edit,
a scale, a README command).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from gitops_sync.cluster.client import Client
    from gitops_sync.cluster.discovery import Discovery, ResourceInfo

REPO = Path(__file__).resolve().parents[1]
LAUNCHER = REPO / "deploy" / "local-cluster" / "cluster.py"


# pytest-xdist groups: `make test` runs tests/integration on several workers (--dist loadgroup) against one
# cluster; a unique namespace per test keeps most tests apart. A test that shares anything else with another
# (a cluster-scoped object, a fixed name or path, the machine's CPU in bulk) joins a group: the tests of one
# group run one after another on one worker.
CRDS = pytest.mark.xdist_group("crds")  # create or delete CRDs: the API's discovery changes under the others
BROWSER = pytest.mark.xdist_group("browser")  # a headless chromium each: one at a time
FIXED_NAMES = pytest.mark.xdist_group("fixed-names")  # fixed namespaces (demo, team-a) and /tmp paths
REGISTRIES = pytest.mark.xdist_group("registries")  # the chart registries of one session: started once
SECOND_CLUSTER = pytest.mark.xdist_group("second-cluster")  # `second_kube`: one second control plane at a time


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook (and after any conftest adding groups)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Make --dist loadgroup group again. pytest-xdist 3.8 tells its controller a test's group by appending
    `@group` to the node id (`item._nodeid`), which pytest 9.2 no longer reads (the id is the structured
    `item._id`): every xdist_group mark was silently ignored, each test scheduled alone (pytest-xdist issue
    1386). The same suffix, on the structured id; nothing when xdist's own took (an older pytest, a fixed
    xdist)."""
    if not getattr(config.option, "loadgroup", False) or not items or not hasattr(items[0], "_id"):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        names = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")
        }
        nodeid = item.nodeid
        if names and nodeid.rfind("@") <= nodeid.rfind("]"):  # xdist's rule for "has a group suffix"
            item._id = NodeId.parse(f"{nodeid}@{'_'.join(sorted(names))}")


@dataclass(frozen=True)
class KubeCluster:
    """A running cluster: `kubeconfig` (admin), `bin_dir` (holds kubectl and helm), `env` for subprocesses."""

    kubeconfig: Path
    bin_dir: Path
    env: dict[str, str] = field(repr=False)
    started_here: bool  # False when an already running cluster (KUBECONFIG) is reused
    state_dir: Path | None = None  # the launcher's state dir (pids, logs) of a cluster started here

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the cluster; raises with its stderr when `check` and it fails."""
        return _run([str(self.bin_dir / "kubectl"), *args], self.env, input, check, timeout)

    def helm(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return _run([str(self.bin_dir / "helm"), *args], self.env, None, check, timeout)

    # -- reading state: the project's own client, not a kubectl process per look -------------------------

    def get(self, kind: str, name: str = "", namespace: str | None = None) -> dict[str, Any]:
        """The object (managedFields included), as `kubectl get -o json`; NotFoundError when it does not exist.

        `kind` as kubectl takes it (`configmap`, `configmaps`, `ConfigMap`, `cm`, `deployments.apps`,
        `gitsync`), or `kind/name` with no `name`."""
        if not name:
            kind, _, name = kind.partition("/")
        info = self.resource(kind)
        doc: dict[str, Any] = self.api.request("GET", info.path(namespace, name))
        return doc

    def find(self, kind: str, name: str = "", namespace: str | None = None) -> dict[str, Any] | None:
        """`get`, None when the object does not exist, nor its kind (a poll for its creation or deletion)."""
        from gitops_sync.errors import NotFoundError

        try:
            return self.get(kind, name, namespace)
        except (NotFoundError, LookupError):
            return None

    def list(
        self, kind: str, namespace: str | None = None, *, labels: str | None = None, fields: str | None = None
    ) -> list[dict[str, Any]]:
        """The items of a collection (all namespaces when `namespace` is None), each with apiVersion and kind."""
        info = self.resource(kind)
        query = {"labelSelector": labels, "fieldSelector": fields}
        items: list[dict[str, Any]] = self.api.request("GET", info.path(namespace), query=query)["items"]
        for item in items:
            item.setdefault("apiVersion", info.api_version)
            item.setdefault("kind", info.kind)
        return items

    @functools.cached_property
    def api(self) -> Client:
        """gitops-sync's Client on the admin kubeconfig, one per session; no circuit breaker (a test polling
        through an API server restart asks again at its own pace)."""
        from gitops_sync.cluster.client import Breaker, Client

        return Client(self.kubeconfig, timeout=15, breaker=Breaker(lambda: None))

    @functools.cached_property
    def _discovery(self) -> Discovery:
        from gitops_sync.cluster.discovery import Discovery

        return Discovery(self.api)

    def resource(self, kind: str) -> ResourceInfo:
        """Where `kind` is served (its preferred version); a kind not found asks the server again once, for
        a CRD installed since."""
        name, _, group = kind.lower().partition(".")
        name = _SHORT_NAMES.get(name, name)
        for attempt in range(2):
            if attempt:
                self._discovery.refresh()
            self._discovery.ensure_loaded()
            found = [
                info
                for info in list(self._discovery._preferred.values())  # every kind, one version each
                if name in (info.kind.lower(), info.plural) and (not group or info.group == group)
            ]
            if found:  # a built-in kind before an aggregated or custom one of the same name
                return min(found, key=lambda i: (i.group not in ("", "apps", "batch"), i.group))
        raise LookupError(f"the cluster serves no kind {kind!r}")


# kubectl's short names of the kinds tests name (discovery's ResourceInfo keeps no short names)
_SHORT_NAMES = {
    "cm": "configmaps",
    "crd": "customresourcedefinitions",
    "deploy": "deployments",
    "ns": "namespaces",
    "sa": "serviceaccounts",
}


def _run(
    cmd: list[str], env: dict[str, str], input: str | None, check: bool, timeout: float
) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, env=env, input=input, capture_output=True, text=True, timeout=timeout, check=False)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd[:4])} ... failed ({r.returncode}):\n{r.stderr}{r.stdout}")
    return r


def _env_for(kubeconfig: Path, bin_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["KUBECONFIG"] = str(kubeconfig)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def _reachable(kubeconfig: Path, kubectl: Path) -> bool:
    try:
        r = subprocess.run(
            [str(kubectl), f"--kubeconfig={kubeconfig}", "get", "--raw=/readyz", "--request-timeout=5s"],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and r.stdout.strip() == "ok"


def _launcher(*args: str) -> str:
    r = subprocess.run([sys.executable, str(LAUNCHER), *args], stdout=subprocess.PIPE, text=True, check=False)
    if r.returncode != 0:  # the launcher's stderr (passed through) names the component and its log tail
        pytest.fail(f"cluster.py {' '.join(args)} failed with exit status {r.returncode}", pytrace=False)
    return r.stdout


# Under the launcher's cache, so `.ci/run` can stop a cluster started here even if pytest is killed first.
SESSIONS = REPO / ".cache" / "local-cluster" / "sessions"


@pytest.fixture(scope="session")
def kube() -> Iterator[KubeCluster]:
    """Reuse the cluster KUBECONFIG points at when its /readyz answers ok; else start one for this session
    (under pytest-xdist: one for the whole run, shared by its workers, see `_xdist_cluster`)."""
    existing = os.environ.get("KUBECONFIG")
    if existing and Path(existing).is_file():
        kubeconfig = Path(existing)
        local_bin = kubeconfig.parent / "bin"  # a cluster.py state dir carries kubectl and helm
        bin_dir = local_bin if (local_bin / "kubectl").exists() else Path(_launcher("build").strip().splitlines()[-1])
        if _reachable(kubeconfig, bin_dir / "kubectl"):
            yield KubeCluster(kubeconfig, bin_dir, _env_for(kubeconfig, bin_dir), started_here=False)
            return
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set in every worker of one `pytest -n` run
    if run_id:
        SESSIONS.mkdir(parents=True, exist_ok=True)
        yield from _xdist_cluster(SESSIONS / f"xdist-{run_id}")
        return
    yield from _own_cluster(_session_state_dir("pytest-"))


def _session_state_dir(prefix: str) -> Path:
    """A state dir for a cluster of this session, under the launcher's cache, so `.ci/run` can stop it even
    if this process is killed before teardown; not created (the launcher creates it, `down` removes it)."""
    SESSIONS.mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix=prefix, dir=SESSIONS))
    state.rmdir()
    return state


def _started(state: Path) -> KubeCluster:
    kubeconfig, bin_dir = state / "kubeconfig", state / "bin"
    return KubeCluster(kubeconfig, bin_dir, _env_for(kubeconfig, bin_dir), started_here=True, state_dir=state)


def _own_cluster(state: Path) -> Iterator[KubeCluster]:
    """`cluster.py --dir state up --auto-ports` (the binaries of LOCAL_CLUSTER_CACHE), `down` afterwards."""
    try:
        _launcher("--dir", str(state), "up", "--auto-ports")
        yield _started(state)
    finally:
        _launcher("--dir", str(state), "down")
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def second_kube(kube: KubeCluster) -> Iterator[KubeCluster]:
    """Another control plane beside `kube` (its own etcd, API server, ports, CA and kube-system UID), started
    for this session (~10 s with the binaries built) and stopped at its end. Tests may freeze or stop its
    components (`state_dir` holds the pids): no other test shares it. Under xdist its tests share one
    worker (the `second-cluster` group), so one second cluster runs at a time."""
    yield from _own_cluster(_session_state_dir("pytest-second-"))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _xdist_cluster(state: Path) -> Iterator[KubeCluster]:
    """One cluster for all the workers of a run (a cluster each would not fit on a small machine): the first
    worker that needs it starts it, each worker counts itself in `state.users`, the last one out stops it."""
    lock, users = state.with_suffix(".lock"), state.with_suffix(".users")
    with _locked(lock):
        count = int(users.read_text() or 0) if users.exists() else 0
        if count == 0:
            _launcher("--dir", str(state), "up", "--auto-ports")
        users.write_text(str(count + 1))
    try:
        yield _started(state)
    finally:
        with _locked(lock):
            count = int(users.read_text()) - 1
            users.write_text(str(count))
            if count == 0:
                _launcher("--dir", str(state), "down")
                shutil.rmtree(state, ignore_errors=True)
                users.unlink()  # the lock file stays: a worker may be waiting on it


@pytest.fixture
def namespace(kube: KubeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new namespace named after the test, deleted (without waiting) when the test ends."""
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{stem}-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", name)
    # Pods are refused until the service-account controller has created the namespace's `default` SA.
    from tests.integration.daemon_support import wait_until

    wait_until(f"serviceaccount/default in {name}", lambda: kube.find("serviceaccount", "default", name), 30, 0.05)
    try:
        yield name
    finally:
        kube.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
