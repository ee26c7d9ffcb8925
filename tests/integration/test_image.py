"""The daemon image (deploy/Containerfile, `make image`) built here without a Docker daemon and RUN: podman as uid
65532 with a read-only root, against the local control plane with a ServiceAccount token where the in-cluster
loader looks, reconciling a GitSync. Skipped, saying why, only where buildah/podman/mmdebstrap are not installed
(.ci/run installs them)."""

from __future__ import annotations

import base64
import json
import os
import resource
import shutil
import socket
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync import __version__
from tests.conftest import KubeCluster
from tests.integration.daemon_support import GitRepo, configmap, wait_established, wait_until

# One worker builds and runs the image (make test: -n 2 --dist loadgroup): the builds share .cache/image.
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("image")]

ROOT = Path(__file__).resolve().parents[2]
# One tag per test session: the container storage is the machine's, shared by every checkout that runs this.
IMAGE = f"localhost/gitops-sync-test:{__version__}-{uuid.uuid4().hex[:8]}"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOOLS = ("buildah", "podman", "mmdebstrap")


def _podman_run_flags() -> list[str]:
    """What this machine needs for `podman run` (docs/install.md): runc, since Debian's crun 1.8 refuses a
    hybrid cgroup v1/v2 layout, and rlimits within the process's own (no CAP_SYS_RESOURCE to raise them)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    flags = ["--ulimit", f"nofile={soft}:{soft}", "--ulimit", "nproc=4096:4096"]
    return (["--runtime", "runc"] if shutil.which("runc") else []) + flags


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing or os.geteuid() != 0:
        pytest.skip(f"the image builder is not installed ({', '.join(missing) or 'not root'}): .ci/run installs it")
    env = {k: v for k, v in os.environ.items() if k != "IMAGE_CACHE"} | {"IMAGE": IMAGE}
    for attempt in (1, 2):  # one clean-clone run saw pip miss a downloaded wheel once; a second try is printed
        done = subprocess.run(
            ["bash", str(ROOT / "deploy" / "image" / "build.sh"), "all"],
            capture_output=True, text=True, env=env, timeout=1200, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            break
        print(f"image build attempt {attempt} failed:\n{done.stderr[-4000:]}")
    assert done.returncode == 0, done.stderr[-4000:]
    report = dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if line.strip())
    assert report["image"] == IMAGE
    assert report["digest"].startswith("sha256:") and report["id"].startswith("sha256:")
    yield IMAGE
    _podman("rmi", IMAGE)


_TREE = (
    "cd {m} && find . -xdev ! -path . -printf '%p %T@ %s %m %U %G %l\\n' | sort"
    " && find . -xdev -type f -print0 | sort -z | xargs -0 sha256sum"
)


def _tree(image: str, script: str = _TREE) -> str:
    """Every file of the image: path, time, size, mode, owner, link target and content hash (or what `script`
    prints in the mounted image)."""
    ctr = subprocess.run(["buildah", "from", "--pull-never", image], capture_output=True, text=True, check=True).stdout
    try:
        mnt = subprocess.run(["buildah", "mount", ctr.strip()], capture_output=True, text=True, check=True).stdout
        return subprocess.run(
            ["sh", "-c", script.format(m=mnt.strip())], capture_output=True, text=True, timeout=300, check=True
        ).stdout
    finally:
        subprocess.run(["buildah", "rm", ctr.strip()], capture_output=True, check=False)


def _config(image: str) -> dict[str, Any]:
    done = subprocess.run(["buildah", "inspect", "--type", "image", image], capture_output=True, text=True, check=True)
    config: dict[str, Any] = json.loads(done.stdout)["OCIv1"]
    return config


def test_two_builds_of_one_commit_give_the_same_image_id_and_digest(image: str) -> None:
    """A second build is the same image, ID and digest: times from the commit, byte code checked by hash, the
    wheels and tools from the context (build.sh uses no layer cache), and the normalisation that sets every time to the
    commit's and squashes the image into one layer (no history naming the base's ID, which changes whenever
    the base is imported again). The image keeps
    what it is: one layer, created at the commit's time, no path of another time, entrypoint, command, user,
    environment, port and labels. When the IDs differ, the files that differ are named."""
    env = {**os.environ, "IMAGE": f"{image}-again"}
    done = subprocess.run(
        ["bash", str(ROOT / "deploy" / "image" / "build.sh"), "all"],
        capture_output=True, text=True, env=env, timeout=1200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    try:
        first, again = _tree(image), _tree(f"{image}-again")
        assert first.count("\n") > 1000
        differ = [line for line in set(first.splitlines()) ^ set(again.splitlines())][:10]
        assert not differ, differ
        ids = [
            _podman("image", "inspect", "--format", "{{.Id}} {{.Digest}}", i).stdout for i in (image, f"{image}-again")
        ]
        assert ids[0].strip() and ids[0] == ids[1], ids
        print(f"two builds: {ids}")
        report = dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if line.strip())
        assert ids[0].split() == [report["id"].removeprefix("sha256:"), report["digest"]], (ids, report)
    finally:
        _podman("rmi", f"{image}-again")
    epoch = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True)
    # Not the mount's root: that is the working container's own layer, not the image's.
    times = _tree(image, "cd {m} && find . -xdev ! -path . -printf '%T@\\n' | sort -u").split()
    assert times == [f"{epoch.stdout.strip()}.0000000000"], times[:5]
    config = _config(image)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch.stdout)))
    assert config["created"] == created and len(config["rootfs"]["diff_ids"]) == 1, config
    c = config["config"]
    kept = (c["Entrypoint"], c["Cmd"], c["User"], c["ExposedPorts"])
    assert kept == (["gitops-sync"], ["run"], "65532:65532", {"8080/tcp": {}}), kept
    assert {"GITOPS_SYNC_CACHE_DIR=/var/cache/gitops-sync", "PYTHONDONTWRITEBYTECODE=1"} <= set(c["Env"]), c["Env"]
    assert c["Labels"]["org.opencontainers.image.version"] == __version__
    assert c["Labels"]["org.opencontainers.image.revision"].startswith(_head()), c["Labels"]


def _head() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)


def test_the_image_carries_its_version_commit_tools_and_sbom(image: str) -> None:
    r = _podman("run", "--rm", *_podman_run_flags(), "--read-only", image, "--version")
    assert r.returncode == 0, r.stderr
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert r.stdout.startswith(f"gitops-sync, version {__version__} (commit {head}"), r.stdout
    r = _podman("run", "--rm", *_podman_run_flags(), "--entrypoint", "sh", image, "-c",
                "id -u; kubectl version --client -o json; helm version --short; "
                "cat /usr/share/gitops-sync/sbom/python-packages.json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    uid, rest = r.stdout.split("\n", 1)
    assert uid == "65532"
    assert '"gitVersion": "v1.37.2"' in rest and "v4.3.2" in rest  # deploy/local-cluster/go.mod's versions
    inventory = json.loads(rest[rest.index('{\n  "version"') :])
    installed = {d["metadata"]["name"].lower(): d["metadata"]["version"] for d in inventory["installed"]}
    locked = (ROOT / "requirements" / "runtime.lock").read_text()
    assert installed["gitops-sync"] == __version__
    for name in ("kubernetes", "waitress", "pyyaml"):
        assert f"{name}=={installed[name]} " in locked, name  # the image holds the locked versions


@pytest.fixture
def service_account(kube: KubeCluster, namespace: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The chart's fleet RBAC for a release in `namespace` (CRD left as it is), and a token of its
    ServiceAccount laid out as the kubelet mounts it."""
    crd = ROOT / "deploy" / "kubernetes" / "crd" / "gitsyncs.gitops-sync.io.yaml"
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    wait_established(kube.env, "gitsyncs.gitops-sync.io", 60)
    release = f"img{uuid.uuid4().hex[:6]}"
    rendered = kube.helm("template", release, str(ROOT / "deploy" / "chart"), "--namespace", namespace,
                         "--set", "mode=fleet", "--set", "crds.install=false").stdout  # fmt: skip
    manifest = tmp_path / "release.yaml"
    manifest.write_text(rendered)
    kube.kubectl("apply", "--server-side", "-f", str(manifest))
    try:
        token = kube.kubectl("create", "token", f"{release}-gitops-sync", "-n", namespace, "--duration=1h").stdout
        cluster = yaml.safe_load(kube.kubeconfig.read_text())["clusters"][0]["cluster"]
        sa = tmp_path / "serviceaccount"
        sa.mkdir()
        (sa / "token").write_text(token.strip())
        (sa / "ca.crt").write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        (sa / "namespace").write_text(namespace)
        for f in (sa, *sa.iterdir()):
            f.chmod(0o755 if f.is_dir() else 0o644)
        yield cluster["server"], sa
    finally:
        kube.kubectl("delete", "-f", str(manifest), "--ignore-not-found", "--wait=false", check=False)


def test_the_image_runs_the_daemon_in_cluster_read_only_and_reconciles_a_gitsync(
    kube: KubeCluster, image: str, namespace: str, service_account: tuple[str, Path], tmp_path: Path
) -> None:
    server, sa = service_account
    url = urllib.parse.urlsplit(server)
    repos = tmp_path / "repos"
    GitRepo(repos / "app", {"cm.yaml": configmap("from-the-image", {"k": "v"})})
    # Owned by the daemon's uid, as a volume with fsGroup 65532 is: Git refuses a repository of another owner
    # ("dubious ownership"), and the image does not turn that check off.
    tmp_path.chmod(0o755)
    for p in (repos, *repos.rglob("*")):
        os.chown(p, 65532, 65532, follow_symlinks=False)
    kube.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "gitops-sync.io/v1alpha1", "kind": "GitSync",
        "metadata": {"name": "app", "namespace": namespace},
        "spec": {"repository": "/srv/repos/app", "interval": "1h"},
    }))  # fmt: skip
    name = f"gitops-sync-{uuid.uuid4().hex[:6]}"
    port = _free_port()
    tls = tmp_path / "tls"  # the port serves HTTPS, as the manifests and the chart run it
    tls.mkdir(mode=0o755)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj",
         "/CN=gitops-sync", "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1",
         "-keyout", str(tls / "tls.key"), "-out", str(tls / "tls.crt")],
        capture_output=True, check=True, timeout=30,
    )  # fmt: skip
    (tls / "tls.key").chmod(0o644)
    r = _podman(
        "run", "--detach", "--name", name, *_podman_run_flags(), "--network", "host",
        "--volume", f"{tls}:/etc/gitops-sync/tls:ro",
        "--user", "65532:65532", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--tmpfs", "/tmp:rw,mode=1777", "--tmpfs", "/var/cache/gitops-sync:rw,mode=1777",
        "--volume", f"{sa}:{SA_DIR}:ro", "--volume", f"{repos}:/srv/repos:ro",
        "--env", f"KUBERNETES_SERVICE_HOST={url.hostname}", "--env", f"KUBERNETES_SERVICE_PORT={url.port}",
        "--env", f"POD_NAMESPACE={namespace}",
        image, "run", f"--watch-namespace={namespace}", "--allow-local-repository=/srv/repos",
        f"--http-addr=127.0.0.1:{port}", "--tls-cert-file=/etc/gitops-sync/tls/tls.crt",
        "--tls-key-file=/etc/gitops-sync/tls/tls.key",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    try:

        def ready() -> bool:
            gs = kube.get("GitSync", "app", namespace)
            conditions = {c["type"]: c for c in gs.get("status", {}).get("conditions", [])}
            return conditions.get("Ready", {}).get("status") == "True"

        wait_until("the GitSync Ready=True, reconciled by the container", ready, timeout=120, interval=1)
        cm = kube.get("ConfigMap", "from-the-image", namespace)
        assert cm["data"] == {"k": "v"}
        https = ssl.create_default_context(cafile=str(tls / "tls.crt"))
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=https, timeout=10) as answer:
            assert answer.status == 200
        inspect = json.loads(_podman("inspect", name).stdout)[0]
        assert inspect["State"]["Running"] is True
        assert inspect["Config"]["User"] == "65532:65532" and inspect["HostConfig"]["ReadonlyRootfs"] is True
        # The root file system is read-only for the daemon itself, not just declared so.
        probe = _podman("exec", name, "sh", "-c", "touch /opt/venv/x 2>&1; id -u")
        assert "Read-only file system" in probe.stdout and probe.stdout.strip().endswith("65532"), probe.stdout
    finally:
        logs = _podman("logs", name).stderr
        Path("/tmp/image-daemon.log").write_text(logs)
        stop = _podman("stop", "--time", "20", name)
        state = json.loads(_podman("inspect", name).stdout or "[{}]")[0].get("State", {})
        _podman("rm", "--force", name)
    assert stop.returncode == 0, stop.stderr
    assert state.get("ExitCode") == 0, logs[-3000:]  # SIGTERM: the pass finishes and the daemon exits 0
    assert "Traceback" not in logs, logs[-3000:]


def test_an_argument_less_run_keeps_running(image: str, tmp_path: Path) -> None:
    """CMD is the daemon (`run`; the old `run --help` exited at once): in a Pod whose API server does not answer
    yet it retries instead of exiting. An API server that refuses (port 1), so no real cluster is touched."""
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    for f, text in (("token", "not-a-token"), ("namespace", "default")):
        (sa / f).write_text(text)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=ca",
         "-days", "1", "-keyout", str(tmp_path / "ca.key"), "-out", str(sa / "ca.crt")],
        capture_output=True, check=True, timeout=30,
    )  # fmt: skip
    tmp_path.chmod(0o755)
    for f in (sa, *sa.iterdir()):
        f.chmod(0o755 if f.is_dir() else 0o644)
    name = f"gitops-sync-noargs-{uuid.uuid4().hex[:6]}"
    r = _podman(
        "run", "--detach", "--name", name, *_podman_run_flags(), "--network", "host", "--read-only",
        "--tmpfs", "/tmp:rw,mode=1777", "--tmpfs", "/var/cache/gitops-sync:rw,mode=1777",
        "--volume", f"{sa}:{SA_DIR}:ro", "--env", "KUBERNETES_SERVICE_HOST=127.0.0.1",
        "--env", "KUBERNETES_SERVICE_PORT=1", "--env", f"GITOPS_SYNC_HTTP_ADDR=127.0.0.1:{_free_port()}",
        image,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    try:
        time.sleep(10)
        state = json.loads(_podman("inspect", name).stdout)[0]["State"]
        logs = _podman("logs", name).stderr
        assert state["Running"] is True, logs[-2000:]
        assert "unreachable" in logs, logs[-2000:]
    finally:
        _podman("rm", "--force", name)
