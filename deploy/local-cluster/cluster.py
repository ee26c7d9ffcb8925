#!/usr/bin/env python3
"""Launcher for the local Kubernetes control plane built from Go modules (see README.md beside this file).

    cluster.py build    build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, helm
    cluster.py up       build when needed, start everything on loopback, wait for /readyz and a Ready node
    cluster.py down     stop every process started from the state dir (by pid) and remove the state dir
    cluster.py status   show each component's pid and health (exit 1 unless all are healthy)
    cluster.py env      print the `export KUBECONFIG=...` and `export PATH=...` lines

Standard library only (Python 3.11), so it runs before any virtual env exists. Progress goes to stderr;
`up` and `env` print only the export lines on stdout, so `eval "$(python3 cluster.py up)"` works.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import hmac
import http.client
import http.server
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# Go packages built, and the name each binary gets (go build names etcd's after its last path element).
PACKAGES = {
    "etcd": "go.etcd.io/etcd/server/v3",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "kwok": "sigs.k8s.io/kwok/cmd/kwok",
    "helm": "helm.sh/helm/v4/cmd/helm",
}
GO_OUTPUT_NAME = {"etcd": "server"}

# Components in start order, and the default loopback port of each (below Linux's ephemeral range).
COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
PORTS = {
    "etcd": 12379,
    "etcd-peer": 12380,
    "kube-apiserver": 16443,
    "kube-controller-manager": 10357,
    "kube-scheduler": 10359,
    "kwok": 10347,
}
PORT_OWNER = {"etcd-peer": "etcd"}
PORT_ENV = {
    "etcd": "LOCAL_CLUSTER_ETCD_PORT",
    "etcd-peer": "LOCAL_CLUSTER_ETCD_PEER_PORT",
    "kube-apiserver": "LOCAL_CLUSTER_APISERVER_PORT",
    "kube-controller-manager": "LOCAL_CLUSTER_CONTROLLER_MANAGER_PORT",
    "kube-scheduler": "LOCAL_CLUSTER_SCHEDULER_PORT",
    "kwok": "LOCAL_CLUSTER_KWOK_PORT",
}

SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"  # the `kubernetes` Service's ClusterIP: first address of SERVICE_CIDR
POD_CIDR = "10.244.0.0/16"
NODE_NAME = "kwok-node-0"
STATE_MARKER = ".local-cluster-state"  # `down` only deletes a directory that carries this file


class ClusterError(Exception):
    """A failure to report as `error: ...` with exit status 1."""


def log(msg: str) -> None:
    print(f"[local-cluster] {msg}", file=sys.stderr, flush=True)


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"    (no log at {path})"
    body = text.splitlines()[-lines:]
    return "\n".join("    " + line for line in body) if body else f"    ({path} is empty)"


# ---------------------------------------------------------------------------------------------- build


def go_mod_version(module: str) -> str:
    """The version go.mod requires (or replaces) for a module."""
    text = (HERE / "go.mod").read_text()
    m = re.search(rf"^\s*{re.escape(module)}\s*=>\s*\S+\s+(v\S+)", text, re.M)
    if not m:
        m = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.M)
    if not m:
        raise ClusterError(f"go.mod does not require {module}")
    return m.group(1)


def ldflags() -> str:
    kube = go_mod_version("k8s.io/kubernetes")  # e.g. v1.37.2
    helm = go_mod_version("helm.sh/helm/v4")
    m = re.fullmatch(r"v(\d+)\.(\d+)\.\d+.*", kube)
    if not m:
        raise ClusterError(f"cannot parse the Kubernetes version {kube!r}")
    major, minor = m.groups()
    flags = ["-s", "-w"]
    # kubectl's client version comes from client-go, the servers' from component-base: stamp both.
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={kube}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.gitCommit=",
        ]
    # Helm v4 has no ldflags variable for the Kubernetes version: its offline default Capabilities derive
    # v1.<minor>.0 from the client-go module version in the binary's build info; against a cluster (install,
    # template --dry-run=server) it uses the API server's real version.
    flags += [
        f"-X helm.sh/helm/v4/internal/version.version={helm}",
        "-X helm.sh/helm/v4/internal/version.gitTreeState=clean",
    ]
    return " ".join(flags)


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=readonly -buildvcs=false")
    return env


def go_needed() -> str:
    """The Go version go.mod asks for (its `go` line): the one place that decides it."""
    for line in (HERE / "go.mod").read_text().splitlines():
        if line.startswith("go "):
            return line.split()[1]
    return "?"


# Optional tool sets, each its own Go module beside this file with its own stamp, built only on request
# (`build --with NAME`, or by the command that needs it): `make cluster-build` never pays for them.
EXTRAS: dict[str, dict[str, str]] = {
    # the CNCF distribution registry (OCI charts and artifacts), and a bcrypt htpasswd line maker for it
    "registry": {
        "registry": "github.com/distribution/distribution/v3/cmd/registry",
        "registry-htpasswd": "./htpasswd",
    },
    # the reference SOPS CLI (encrypted Secrets in Git, issue 25) and age-keygen for its keys
    "sops": {"sops": "github.com/getsops/sops/v3/cmd/sops", "age-keygen": "filippo.io/age/cmd/age-keygen"},
}
EXTRA_OUTPUT_NAME = {"registry-htpasswd": "htpasswd"}


def build_stamp(flags: str, module_dir: Path = HERE) -> str:
    go = shutil.which("go")
    if not go:
        raise ClusterError(f"component go build: `go` is not on PATH (Go {go_needed()} or newer is needed)")
    goversion = subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout.strip()
    h = hashlib.sha256()
    for part in (
        (module_dir / "go.mod").read_bytes(),
        (module_dir / "go.sum").read_bytes(),
        flags.encode(),
        goversion.encode(),
    ):
        h.update(hashlib.sha256(part).digest())
    if module_dir != HERE:  # an extra's own sources count too (the control plane has none of its own)
        for src in sorted(module_dir.rglob("*.go")):
            h.update(hashlib.sha256(src.read_bytes()).digest())
    return h.hexdigest()


def build(cache_dir: Path, force: bool = False) -> Path:
    """Build all seven binaries into <cache>/bin unless the stamp says they are current. Returns the bin dir."""
    return _build_set(cache_dir, "", HERE, PACKAGES, GO_OUTPUT_NAME, ldflags(), force)


def build_extra(cache_dir: Path, name: str, force: bool = False) -> Path:
    """Build one optional tool set (EXTRAS) from its own module into <cache>/bin, stamped apart."""
    if name not in EXTRAS:
        raise ClusterError(f"unknown tool set {name!r} (known: {', '.join(EXTRAS)})")
    return _build_set(cache_dir, name, HERE / name, EXTRAS[name], EXTRA_OUTPUT_NAME, "-s -w", force)


# Flux's own controllers (the peer of bench/fleet_flux.py), versions of Flux v2.9.5 (fluxcd/flux2's
# manifests/bases). Each is built inside a copy of its downloaded module source: their go.mod replaces the
# `<module>/api` module with `./api`, a nested module the module zip leaves out, so `go install …@version`
# refuses them; the copy drops that replace and takes the published api module of the same version.
FLUX_VERSION = "v2.9.5"
FLUX: dict[str, tuple[str, str]] = {
    "source-controller": ("github.com/fluxcd/source-controller", "v1.9.5"),
    "kustomize-controller": ("github.com/fluxcd/kustomize-controller", "v1.9.5"),
}
# Dependencies pinned by a `replace` in the copy: the module proxy this machine reaches does not serve
# github.com/fluxcd/pkg/artifact v0.18.3 (403 "not available"); v0.18.0 is the nearest it serves (same minor).
FLUX_REPLACE: dict[str, list[str]] = {
    "source-controller": ["github.com/fluxcd/pkg/artifact=github.com/fluxcd/pkg/artifact@v0.18.0"],
}


def flux_crd_dir(cache_dir: Path) -> Path:
    """Where `build --with flux` leaves the controllers' CRDs (config/crd/bases of each module)."""
    return cache_dir / "flux" / "crds"


def build_flux(cache_dir: Path, force: bool = False) -> Path:
    """Build source-controller and kustomize-controller into <cache>/bin, one at a time (a cold build is
    heavy: ~15-30 min on 2 shared cores), stamped apart; their CRDs go to flux_crd_dir. Returns the bin dir."""
    bin_dir = cache_dir / "bin"
    stamp_file = bin_dir / ".stamp-flux"
    go = shutil.which("go")
    if not go:
        raise ClusterError(f"component go build: `go` is not on PATH (Go {go_needed()} or newer is needed)")
    goversion = subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout.strip()
    stamp = hashlib.sha256(
        json.dumps([sorted(FLUX.items()), sorted(FLUX_REPLACE.items()), goversion, "-s -w"]).encode()
    ).hexdigest()
    crds = flux_crd_dir(cache_dir)

    def current() -> bool:
        return (
            stamp_file.is_file()
            and stamp_file.read_text().strip() == stamp
            and all(os.access(bin_dir / name, os.X_OK) for name in FLUX)
            and any(crds.glob("*.yaml"))
        )

    if current() and not force:
        log(f"binaries are current ({bin_dir}: {', '.join(FLUX)})")
        return bin_dir
    cache_dir.mkdir(parents=True, exist_ok=True)
    # a lock of its own: a background Flux build (CI starts one early) never holds up `make cluster-build`
    with open(cache_dir / ".build-flux.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if current() and not force:
            return bin_dir
        build_log = cache_dir / "build-flux.log"
        t0 = time.monotonic()
        with open(build_log, "w") as out:
            staged = {
                name: _build_flux_one(cache_dir, name, module, version, out) for name, (module, version) in FLUX.items()
            }
        bin_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(crds, ignore_errors=True)
        crds.mkdir(parents=True)
        for name, (binary, src) in staged.items():
            os.replace(binary, bin_dir / name)
            binary.parent.rmdir()
            for crd in sorted((src / "config" / "crd" / "bases").glob("*.yaml")):
                shutil.copy(crd, crds / crd.name)
        stamp_file.write_text(stamp + "\n")
        log(f"built {', '.join(FLUX)} in {time.monotonic() - t0:.1f} s into {bin_dir} (log: {build_log})")
    return bin_dir


def _build_flux_one(cache_dir: Path, name: str, module: str, version: str, out: Any) -> tuple[Path, Path]:
    """Download one controller's module source, copy it, drop its ./api replace, build it. Returns the
    binary (in a temporary dir) and the source copy."""
    env = go_env()

    def go_run(cmd: list[str], cwd: Path, mod: str = "readonly") -> str:
        out.write("$ " + shlex.join(cmd) + f"   (in {cwd})\n")
        out.flush()
        run_env = dict(env, GOFLAGS=f"-mod={mod} -buildvcs=false")
        r = subprocess.run(cmd, cwd=cwd, env=run_env, stdout=subprocess.PIPE, stderr=out, text=True, check=False)
        out.write(r.stdout)
        out.flush()
        if r.returncode != 0:
            raise ClusterError(
                f"component go build failed (exit {r.returncode}) building {name}; tail of {out.name}:\n"
                f"{tail(Path(out.name), 40)}"
            )
        return r.stdout

    log(f"building {name} {version} (log: {out.name}); a cold build takes 10-30 minutes")
    dl = json.loads(go_run(["go", "mod", "download", "-json", f"{module}@{version}"], cache_dir, mod="mod"))
    src = cache_dir / "flux" / "src" / f"{name}@{version}"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(dl["Dir"], src)
    for path in [src, *src.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    pins = [f"-replace={pin}" for pin in FLUX_REPLACE.get(name, [])]
    go_run(["go", "mod", "edit", f"-dropreplace={module}/api", *pins], src)
    go_run(["go", "get", f"{module}/api@{version}"], src, mod="mod")  # go.sum lines of the published api
    out_dir = Path(tempfile.mkdtemp(prefix="bin.", dir=cache_dir))
    procs = os.environ.get("LOCAL_CLUSTER_BUILD_PROCS", "2")
    # -mod=mod: the copy's go.sum takes the sums of the replaced modules (checked against the checksum database)
    go_run(
        ["go", "build", "-p", procs, "-trimpath", "-ldflags", "-s -w", "-o", str(out_dir / name), "."], src, mod="mod"
    )
    return out_dir / name, src


def _build_set(
    cache_dir: Path,
    name: str,
    module_dir: Path,
    packages: dict[str, str],
    output_names: dict[str, str],
    flags: str,
    force: bool,
) -> Path:
    bin_dir = cache_dir / "bin"
    stamp_file = bin_dir / (f".stamp-{name}" if name else ".stamp")
    stamp = build_stamp(flags, module_dir)
    what = ", ".join(packages)

    def current() -> bool:
        return (
            stamp_file.is_file()
            and stamp_file.read_text().strip() == stamp
            and all(os.access(bin_dir / binary, os.X_OK) for binary in packages)
        )

    if current() and not force:
        log(f"binaries are current ({bin_dir}{': ' + what if name else ''})")
        return bin_dir
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent build of the same tree waits for this one
        if current() and not force:
            return bin_dir
        build_log = cache_dir / (f"build-{name}.log" if name else "build.log")
        out_dir = Path(tempfile.mkdtemp(prefix="bin.", dir=cache_dir))
        cmd = ["go", "build", "-trimpath", "-ldflags", flags, "-o", str(out_dir) + "/", *packages.values()]
        log(f"building {what} (log: {build_log}); a cold build takes minutes")
        t0 = time.monotonic()
        with open(build_log, "w") as out:
            out.write("$ " + shlex.join(cmd) + "\n")
            out.flush()
            rc = subprocess.run(
                cmd,
                cwd=module_dir,
                env=go_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                check=False,
            ).returncode
        if rc != 0:
            shutil.rmtree(out_dir, ignore_errors=True)
            raise ClusterError(
                f"component go build failed (exit {rc}) building {what}; tail of {build_log}:\n{tail(build_log, 40)}"
            )
        bin_dir.mkdir(parents=True, exist_ok=True)
        for binary, pkg in packages.items():
            # rename, never overwrite in place: processes running the old binary keep their inode
            built = output_names.get(binary, pkg.rstrip("/").rsplit("/", 1)[-1])
            os.replace(out_dir / built, bin_dir / binary)
        shutil.rmtree(out_dir, ignore_errors=True)
        stamp_file.write_text(stamp + "\n")
        log(f"built in {time.monotonic() - t0:.1f} s into {bin_dir}")
    return bin_dir


# ---------------------------------------------------------------------------------------------- config


@dataclass
class Config:
    state_dir: Path
    cache_dir: Path
    ports: dict[str, int]
    timeout: float

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pids(self) -> Path:
        return self.state_dir / "pids"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def tools_dir(self) -> Path:
        return self.state_dir / "bin"

    @property
    def bin_dir(self) -> Path:
        return self.cache_dir / "bin"

    def env_lines(self) -> str:
        return f"export KUBECONFIG={self.kubeconfig}\nexport PATH={self.tools_dir}:$PATH\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_config(args: argparse.Namespace) -> Config:
    state = Path(args.dir or os.environ.get("LOCAL_CLUSTER_DIR") or REPO / ".local-cluster").resolve()
    cache = Path(args.cache_dir or os.environ.get("LOCAL_CLUSTER_CACHE") or REPO / ".cache" / "local-cluster")
    ports = dict(PORTS)
    saved = state / "state.json"
    if saved.is_file() and getattr(args, "command", "") != "up":
        # status/env/down talk to whatever the state dir says was started
        with contextlib.suppress(ValueError, OSError):
            ports.update(json.loads(saved.read_text())["ports"])
    else:
        auto = getattr(args, "auto_ports", False) or os.environ.get("LOCAL_CLUSTER_AUTO_PORTS") == "1"
        for comp in PORTS:
            flag = getattr(args, comp.replace("-", "_") + "_port", None)
            if flag:
                ports[comp] = flag
            elif os.environ.get(PORT_ENV[comp]):
                ports[comp] = int(os.environ[PORT_ENV[comp]])
            elif auto:
                ports[comp] = free_port()
    return Config(state_dir=state, cache_dir=cache.resolve(), ports=ports, timeout=args.timeout)


# ---------------------------------------------------------------------------------------------- pki


def openssl(*args: str) -> None:
    r = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise ClusterError(f"component pki: openssl {' '.join(args[:2])} failed:\n{r.stderr.strip()}")


def make_key(key: Path) -> None:
    """A P-256 private key, readable by its owner only."""
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
    key.chmod(0o600)


def make_cert(pki: Path, name: str, subject: str, ext: str, ca: bool = False) -> None:
    key, crt = pki / f"{name}.key", pki / f"{name}.crt"
    make_key(key)
    extfile = pki / f"{name}.ext"
    extfile.write_text(f"[ext]\n{ext}\n")
    if ca:
        openssl(
            "req",
            "-x509",
            "-new",
            "-key",
            str(key),
            "-subj",
            subject,
            "-days",
            "3650",
            "-config",
            str(extfile),
            "-extensions",
            "ext",
            "-out",
            str(crt),
        )
    else:
        csr = pki / f"{name}.csr"
        openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
        openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(pki / "ca.crt"),
            "-CAkey",
            str(pki / "ca.key"),
            "-CAcreateserial",
            "-days",
            "3650",
            "-extfile",
            str(extfile),
            "-extensions",
            "ext",
            "-out",
            str(crt),
        )
        csr.unlink()
    extfile.unlink()


CLIENT_EXT = (
    "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    "extendedKeyUsage=clientAuth"
)
# Client identities: (file name, subject). system:masters bypasses RBAC for the admin; the control-plane
# components get the users that RBAC's bootstrap policy binds to their ClusterRoles.
CLIENTS = [
    ("admin", "/O=system:masters/CN=local-cluster-admin"),
    ("kube-controller-manager", "/CN=system:kube-controller-manager"),
    ("kube-scheduler", "/CN=system:kube-scheduler"),
    ("kwok", "/O=system:masters/CN=kwok-controller"),
    # the aggregation layer's identity towards extension API servers (trusted via --requestheader-*)
    ("front-proxy-client", "/CN=front-proxy-client"),
]


def make_pki(cfg: Config) -> None:
    pki = cfg.pki
    pki.mkdir(parents=True, exist_ok=True)
    make_cert(
        pki,
        "ca",
        "/CN=local-cluster-ca",
        "basicConstraints=critical,CA:TRUE\n"
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature\nsubjectKeyIdentifier=hash",
        ca=True,
    )
    sans = ",".join(
        [
            "IP:127.0.0.1",
            f"IP:{SERVICE_IP}",
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
        ]
    )
    make_cert(
        pki,
        "apiserver",
        "/CN=kube-apiserver",
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        f"subjectAltName={sans}",
    )
    for name, subject in CLIENTS:
        make_cert(pki, name, subject, CLIENT_EXT)
    # service-account token signing key; the API server verifies tokens with its public half
    make_key(pki / "sa.key")
    openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig_text(cfg: Config, user: str, embed: bool) -> str:
    pki = cfg.pki
    server = f"https://127.0.0.1:{cfg.ports['kube-apiserver']}"
    if embed:
        ca = f"certificate-authority-data: {b64(pki / 'ca.crt')}"
        cert = f"client-certificate-data: {b64(pki / (user + '.crt'))}"
        key = f"client-key-data: {b64(pki / (user + '.key'))}"
    else:
        ca = f"certificate-authority: {pki / 'ca.crt'}"
        cert = f"client-certificate: {pki / (user + '.crt')}"
        key = f"client-key: {pki / (user + '.key')}"
    return f"""apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: {server}
    {ca}
users:
- name: {user}
  user:
    {cert}
    {key}
contexts:
- name: local
  context:
    cluster: local
    user: {user}
    namespace: default
current-context: local
preferences: {{}}
"""


def write_kubeconfigs(cfg: Config) -> None:
    cfg.kubeconfig.write_text(kubeconfig_text(cfg, "admin", embed=True))
    cfg.kubeconfig.chmod(0o600)
    for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
        p = cfg.state_dir / f"{name}.kubeconfig"
        p.write_text(kubeconfig_text(cfg, name, embed=False))
        p.chmod(0o600)


# ---------------------------------------------------------------------------------------------- http


class Api:
    """A tiny HTTPS client for the API server with the admin certificate."""

    def __init__(self, cfg: Config) -> None:
        self.port = cfg.ports["kube-apiserver"]
        self.ctx = ssl.create_default_context(cafile=str(cfg.pki / "ca.crt"))
        self.ctx.load_cert_chain(str(cfg.pki / "admin.crt"), str(cfg.pki / "admin.key"))

    def request(self, method: str, path: str, body: Any = None, timeout: float = 3.0) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json", "Accept": "application/json"} if data else {}
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def ok(self, path: str) -> bool:
        try:
            status, _ = self.request("GET", path, timeout=2.0)
            return status == 200
        except (OSError, http.client.HTTPException):
            return False

    def get_json(self, path: str) -> dict[str, Any] | None:
        try:
            status, data = self.request("GET", path)
        except (OSError, http.client.HTTPException):
            return None
        return json.loads(data) if status == 200 else None


def http_ok(port: int, path: str, *, tls: bool = False) -> bool:
    """A component's health endpoint answers 200; `tls`: over HTTPS with a self-signed certificate
    (kube-controller-manager, scheduler)."""
    conn = (
        http.client.HTTPSConnection("127.0.0.1", port, context=ssl._create_unverified_context(), timeout=2.0)
        if tls
        else http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
    )
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------------- processes


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # SO_REUSEADDR: a port in TIME_WAIT after a recent `down` is free for the Go servers (they set it too);
        # only a live listener makes bind fail.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def pid_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped) is not alive
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


@dataclass
class Proc:
    name: str
    pid: int
    exe: str
    popen: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return pid_alive(self.pid) and self.is_ours()

    def is_ours(self) -> bool:
        """The pid still runs the binary we started (guards against pid reuse before signalling it)."""
        cmd = pid_cmdline(self.pid)
        return bool(cmd) and cmd[0] == self.exe


def read_pids(cfg: Config) -> list[Proc]:
    procs = []
    if cfg.pids.is_dir():
        for f in sorted(cfg.pids.glob("*.pid")):
            with contextlib.suppress(ValueError, OSError, KeyError):
                data = json.loads(f.read_text())
                procs.append(Proc(name=f.stem, pid=int(data["pid"]), exe=data["exe"]))
    return procs


STOP_TIERS = [{"kwok", "kube-scheduler", "kube-controller-manager"}, {"kube-apiserver"}, {"etcd"}]


def stop(procs: list[Proc], timeout: float = 15.0) -> None:
    """Stop clients before the API server and the API server before etcd (each then shuts down at once)."""
    tiers = [[p for p in procs if p.name in tier] for tier in STOP_TIERS]
    tiers.append([p for p in procs if not any(p.name in tier for tier in STOP_TIERS)])
    for tier in tiers:
        stop_together(tier, timeout)


def stop_together(procs: list[Proc], timeout: float) -> None:
    """TERM each process and its process group, wait, then KILL whatever is left."""
    targets = [p for p in procs if p.alive()]
    for p in targets:
        log(f"stopping {p.name} (pid {p.pid})")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGTERM)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.alive() for p in targets):
        time.sleep(0.05)
    for p in targets:
        if p.alive():
            log(f"{p.name} (pid {p.pid}) ignored SIGTERM for {timeout:.0f} s: SIGKILL")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, signal.SIGKILL)
        if p.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=5)
    # the process group may hold children of a component (none of ours fork, but be thorough)
    for p in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)


def component_args(cfg: Config, name: str) -> list[str]:
    b, pki, st, ports = cfg.bin_dir, cfg.pki, cfg.state_dir, cfg.ports
    if name == "etcd":
        client, peer = f"http://127.0.0.1:{ports['etcd']}", f"http://127.0.0.1:{ports['etcd-peer']}"
        return [
            str(b / "etcd"),
            "--name=local",
            f"--data-dir={st / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=local={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",  # throw-away test data: durability is not worth the fsync latency
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=5m",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ]
    if name == "kube-apiserver":
        return [
            str(b / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # Endpoints may not hold loopback addresses, and no real Pod ever dials the `kubernetes`
            # Service here: the Service exists (10.0.0.1) without endpoints.
            "--endpoint-reconciler-type=none",
            f"--secure-port={ports['kube-apiserver']}",
            f"--cert-dir={pki / 'apiserver-generated'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            f"--requestheader-client-ca-file={pki / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            f"--audit-policy-file={HERE / 'audit-policy.yaml'}",
            f"--audit-log-path={cfg.logs / 'audit.log'}",
            "--audit-log-maxsize=200",
            "--audit-log-maxbackup=1",
            "--shutdown-delay-duration=0s",
        ]
    if name == "kube-controller-manager":
        kc = st / "kube-controller-manager.kubeconfig"
        return [
            str(b / "kube-controller-manager"),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kube-controller-manager']}",
            f"--cert-dir={pki / 'kube-controller-manager-generated'}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--cluster-name=local-cluster",
        ]
    if name == "kube-scheduler":
        kc = st / "kube-scheduler.kubeconfig"
        return [
            str(b / "kube-scheduler"),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kube-scheduler']}",
            f"--cert-dir={pki / 'kube-scheduler-generated'}",
            "--leader-elect=false",
        ]
    if name == "kwok":
        return [
            str(b / "kwok"),
            f"--kubeconfig={st / 'kwok.kubeconfig'}",
            f"--config={HERE / 'kwok-stages.yaml'}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1",
            f"--node-port={ports['kwok']}",
            f"--server-address=127.0.0.1:{ports['kwok']}",
            f"--cidr={POD_CIDR}",
            "--node-lease-duration-seconds=40",
        ]
    raise ValueError(name)


def start(cfg: Config, name: str) -> Proc:
    args = component_args(cfg, name)
    logf = open(cfg.logs / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it from here on
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "ETCDCTL_API")}
    popen = subprocess.Popen(
        args,
        stdout=logf,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=cfg.state_dir,
        env=env,
        start_new_session=True,
    )
    logf.close()
    proc = Proc(name=name, pid=popen.pid, exe=args[0], popen=popen)
    (cfg.pids / f"{name}.pid").write_text(json.dumps({"pid": popen.pid, "exe": args[0]}) + "\n")
    return proc


# ---------------------------------------------------------------------------------------------- up


def node_ready(node: dict[str, Any] | None) -> bool:
    if not node:
        return False
    conds = node.get("status", {}).get("conditions", [])
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
    # the node lifecycle controller lifts the not-ready taint once it sees Ready: only then can Pods land
    tainted = any(t.get("key", "").startswith("node.kubernetes.io/") for t in node.get("spec", {}).get("taints") or [])
    return ready and not tainted


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": NODE_NAME,
        "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        "labels": {
            "kubernetes.io/hostname": NODE_NAME,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        },
    },
    "spec": {},
}


@dataclass
class Starter:
    cfg: Config
    procs: dict[str, Proc] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)
    marks: list[str] = field(default_factory=list)

    def check_alive(self) -> None:
        for p in self.procs.values():
            if not p.alive():
                rc = p.popen.returncode if p.popen is not None else None
                how = (
                    f"was killed by {signal.Signals(-rc).name}"
                    if rc is not None and rc < 0
                    else f"exited with status {rc}"
                )
                log_path = self.cfg.logs / f"{p.name}.log"
                raise ClusterError(f"component {p.name} {how} during start-up; tail of {log_path}:\n{tail(log_path)}")

    def wait(self, what: str, component: str, check: Any, deadline: float) -> None:
        while True:
            self.check_alive()
            if check():
                self.marks.append(f"{component} {what} {time.monotonic() - self.t0:.1f}s")
                return
            if time.monotonic() > deadline:
                log_path = self.cfg.logs / f"{component}.log"
                raise ClusterError(
                    f"component {component} did not become ready ({what}) within "
                    f"{self.cfg.timeout:.0f} s; tail of {log_path}:\n{tail(log_path)}"
                )
            time.sleep(0.1)


def running_config(cfg: Config) -> Config:
    """The config with the ports the cluster in this state dir was started with, whatever was asked now."""
    with contextlib.suppress(ValueError, OSError, KeyError):
        ports = json.loads((cfg.state_dir / "state.json").read_text())["ports"]
        return Config(cfg.state_dir, cfg.cache_dir, ports, cfg.timeout)
    return cfg


def all_alive(cfg: Config) -> bool:
    procs = {p.name: p for p in read_pids(cfg)}
    return set(procs) == set(COMPONENTS) and all(p.alive() for p in procs.values())


def healthy(cfg: Config) -> bool:
    """A cluster from this state dir is running: every component alive, /readyz ok, the node Ready."""
    if not (cfg.state_dir / "state.json").is_file() or not cfg.pki.joinpath("admin.crt").is_file():
        return False
    cfg = running_config(cfg)
    if not all_alive(cfg):
        return False
    api = Api(cfg)
    return api.ok("/readyz") and node_ready(api.get_json(f"/api/v1/nodes/{NODE_NAME}"))


def lock_state(cfg: Config) -> Any:
    """Serialise up/down on one state dir (the lock file lives in the cache dir, not beside the state)."""
    locks = cfg.cache_dir / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(str(cfg.state_dir).encode()).hexdigest()[:16]
    lock = open(locks / f"{cfg.state_dir.name}-{key}.lock", "w")  # noqa: SIM115
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def up(cfg: Config) -> None:
    lock = lock_state(cfg)
    try:
        if (cfg.state_dir / "state.json").is_file() and all_alive(cfg):
            # Every process of a cluster runs: never tear it down under its users; give it time to settle.
            deadline = time.monotonic() + cfg.timeout
            while not healthy(cfg):
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"the cluster in {cfg.state_dir} runs but is not healthy (see "
                        f"`cluster.py status` and {cfg.logs}); run `down` first to replace it"
                    )
                time.sleep(0.5)
            log(f"a cluster from {cfg.state_dir} is already up: starting nothing")
            sys.stdout.write(cfg.env_lines())
            return
        if cfg.state_dir.exists():
            log(f"{cfg.state_dir} holds a stopped or unhealthy cluster: removing it")
            down(cfg, locked=True)
        # Ports before the build: a port in use is known in a millisecond, the build can take minutes.
        for comp, port in cfg.ports.items():
            if port_in_use(port):
                owner = PORT_OWNER.get(comp, comp)
                raise ClusterError(
                    f"component {owner}: port 127.0.0.1:{port} ({comp}) is already in use; "
                    f"stop what listens there, choose another port with --{comp}-port "
                    f"or {PORT_ENV[comp]}, or let it pick free ones: --auto-ports or LOCAL_CLUSTER_AUTO_PORTS=1"
                )
        build(cfg.cache_dir)
        _up(cfg)
    finally:
        lock.close()
    sys.stdout.write(cfg.env_lines())


def _up(cfg: Config) -> None:
    t0 = time.monotonic()
    deadline = t0 + cfg.timeout
    for d in (cfg.state_dir, cfg.logs, cfg.pids, cfg.tools_dir):
        d.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / STATE_MARKER).write_text("created by deploy/local-cluster/cluster.py\n")
    (cfg.state_dir / "state.json").write_text(
        json.dumps({"ports": cfg.ports, "node": NODE_NAME, "bin_dir": str(cfg.bin_dir)}, indent=1) + "\n"
    )
    make_pki(cfg)
    write_kubeconfigs(cfg)
    for tool in ("kubectl", "helm"):
        (cfg.tools_dir / tool).symlink_to(cfg.bin_dir / tool)
    (cfg.state_dir / "env.sh").write_text(cfg.env_lines())

    s = Starter(cfg, t0=t0)
    try:
        # etcd and the API server start together: the API server retries its etcd connection
        for name in ("etcd", "kube-apiserver"):
            s.procs[name] = start(cfg, name)
        s.wait("GET /health", "etcd", lambda: http_ok(cfg.ports["etcd"], "/health"), deadline)
        api = Api(cfg)
        # /healthz first: kube-controller-manager gives up when the API server is not healthy in 10 s
        s.wait("GET /healthz", "kube-apiserver", lambda: api.ok("/healthz"), deadline)
        log(f"kube-apiserver healthy after {time.monotonic() - t0:.1f} s")
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            s.procs[name] = start(cfg, name)

        def create_node() -> bool:
            try:
                status, body = api.request("POST", "/api/v1/nodes", NODE)
            except (OSError, http.client.HTTPException):
                return False
            if status in (201, 409):
                return True
            if status >= 500 or status == 429:
                return False
            raise ClusterError(f"component kube-apiserver refused the node: {status} {body[:300]!r}")

        s.wait("create Node", "kube-apiserver", create_node, deadline)
        s.wait("GET /readyz", "kube-apiserver", lambda: api.ok("/readyz"), deadline)
        s.wait(
            "GET /healthz",
            "kube-controller-manager",
            lambda: http_ok(cfg.ports["kube-controller-manager"], "/healthz", tls=True),
            deadline,
        )
        s.wait(
            "GET /healthz",
            "kube-scheduler",
            lambda: http_ok(cfg.ports["kube-scheduler"], "/healthz", tls=True),
            deadline,
        )
        s.wait(
            f"node {NODE_NAME} Ready", "kwok", lambda: node_ready(api.get_json(f"/api/v1/nodes/{NODE_NAME}")), deadline
        )
        # the service-account controller runs with its own credentials: its `default` SA proves it works
        s.wait(
            "ServiceAccount default/default",
            "kube-controller-manager",
            lambda: api.get_json("/api/v1/namespaces/default/serviceaccounts/default") is not None,
            deadline,
        )
        s.check_alive()
    except BaseException:
        stop(list(s.procs.values()))
        for f in cfg.pids.glob("*.pid"):
            f.unlink()
        log(f"start-up failed: every process was stopped; logs are kept in {cfg.logs}")
        raise
    log("reached (seconds since start): " + "; ".join(s.marks))
    log(
        f"cluster ready in {time.monotonic() - t0:.1f} s: kube-apiserver https://127.0.0.1:"
        f"{cfg.ports['kube-apiserver']}, node {NODE_NAME}, state {cfg.state_dir}"
    )


# ---------------------------------------------------------------------------------------------- down/status


def down(cfg: Config, locked: bool = False) -> None:
    lock = None if locked else lock_state(cfg)
    try:
        procs = read_pids(cfg)
        foreign = [p for p in procs if pid_alive(p.pid) and not p.is_ours()]
        for p in foreign:
            log(f"pid {p.pid} recorded for {p.name} now runs something else: leaving it alone")
        stop([p for p in procs if p not in foreign])
        if cfg.state_dir.exists():
            if not (cfg.state_dir / STATE_MARKER).is_file():
                raise ClusterError(
                    f"{cfg.state_dir} has no {STATE_MARKER}: not a local-cluster state dir, not removing it"
                )
            shutil.rmtree(cfg.state_dir)
            log(f"removed {cfg.state_dir}")
        else:
            log(f"nothing at {cfg.state_dir}")
    finally:
        if lock is not None:
            lock.close()


def status(cfg: Config) -> int:
    if not (cfg.state_dir / "state.json").is_file():
        print(f"no cluster in {cfg.state_dir}")
        return 1
    procs = {p.name: p for p in read_pids(cfg)}
    api = Api(cfg)
    checks = {
        "etcd": lambda: http_ok(cfg.ports["etcd"], "/health"),
        "kube-apiserver": lambda: api.ok("/readyz"),
        "kube-controller-manager": lambda: http_ok(cfg.ports["kube-controller-manager"], "/healthz", tls=True),
        "kube-scheduler": lambda: http_ok(cfg.ports["kube-scheduler"], "/healthz", tls=True),
        "kwok": lambda: node_ready(api.get_json(f"/api/v1/nodes/{NODE_NAME}")),
    }
    good = True
    for name in COMPONENTS:
        p = procs.get(name)
        alive = p is not None and p.alive()
        ok = alive and checks[name]()
        good &= ok
        port = cfg.ports[name]
        print(
            f"{name:24} pid {p.pid if p else '-':>7}  port {port:>5}  "
            f"{'running' if alive else 'NOT RUNNING'}  {'healthy' if ok else 'UNHEALTHY'}"
        )
    print(f"kubeconfig: {cfg.kubeconfig}")
    return 0 if good else 1


# ---------------------------------------------------------------------------------------------- registries

# Chart sources for tests and demos (issue 24): the CNCF distribution registry (OCI, `helm push`) and an HTTPS
# chart repository (a directory indexed by `helm repo index`), both on loopback, both behind TLS from their own
# CA and one basic-auth user. State in their own dir (`--dir`, default <repo>/.local-registry), apart from the
# cluster's: either runs without the other.
REGISTRY_PORTS = {"registry": 15000, "chart-repo": 15443}
REGISTRY_USER = "gitops"


def registry_config(args: argparse.Namespace) -> Config:
    state = Path(args.dir or os.environ.get("LOCAL_REGISTRY_DIR") or REPO / ".local-registry").resolve()
    cache = Path(args.cache_dir or os.environ.get("LOCAL_CLUSTER_CACHE") or REPO / ".cache" / "local-cluster")
    ports = dict(REGISTRY_PORTS)
    saved = state / "registry.json"
    if saved.is_file() and args.command != "registry-up":
        with contextlib.suppress(ValueError, OSError, KeyError):
            ports.update(json.loads(saved.read_text())["ports"])
    elif getattr(args, "auto_ports", False):
        ports = {name: free_port() for name in ports}
    return Config(state_dir=state, cache_dir=cache.resolve(), ports=ports, timeout=args.timeout)


def https_status(port: int, path: str, ca: Path) -> int | None:
    """The status of an unauthenticated GET, verifying the server against our CA; None when nothing answers."""
    conn = http.client.HTTPSConnection(
        "127.0.0.1", port, context=ssl.create_default_context(cafile=str(ca)), timeout=2.0
    )
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def registry_up(cfg: Config) -> None:
    """Start the OCI registry and the chart repository; write <state>/registry.json (what clients need)."""
    lock = lock_state(cfg)
    try:
        saved = cfg.state_dir / "registry.json"
        with contextlib.suppress(ValueError, OSError, KeyError):
            running = Config(cfg.state_dir, cfg.cache_dir, json.loads(saved.read_text())["ports"], cfg.timeout)
            if registry_healthy(running):  # whatever ports were asked now: never restart them under their users
                log(f"the registries from {cfg.state_dir} are already up: starting nothing")
                return
        if cfg.state_dir.exists():
            registry_down(cfg, locked=True)
        for comp, port in cfg.ports.items():
            if port_in_use(port):
                raise ClusterError(f"component {comp}: port 127.0.0.1:{port} is already in use; try --auto-ports")
        bin_dir = build_extra(cfg.cache_dir, "registry")
        _registry_up(cfg, bin_dir)
    finally:
        lock.close()


def _registry_up(cfg: Config, bin_dir: Path) -> None:
    t0 = time.monotonic()
    for d in (cfg.state_dir, cfg.logs, cfg.pids, cfg.state_dir / "charts", cfg.state_dir / "registry-data"):
        d.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / STATE_MARKER).write_text("created by deploy/local-cluster/cluster.py registry-up\n")
    pki = cfg.pki
    pki.mkdir(exist_ok=True)
    make_cert(
        pki,
        "ca",
        "/CN=local-registry-ca",
        "basicConstraints=critical,CA:TRUE\n"
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature\nsubjectKeyIdentifier=hash",
        ca=True,
    )
    make_cert(
        pki,
        "server",
        "/CN=local-registry",
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost",
    )
    password = secrets.token_urlsafe(18)
    pw_file = cfg.state_dir / "password"
    pw_file.touch(mode=0o600)
    pw_file.write_text(password + "\n")
    line = subprocess.run(
        [str(bin_dir / "registry-htpasswd"), REGISTRY_USER],
        input=password + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    if line.returncode != 0:
        raise ClusterError(f"component registry: htpasswd failed: {line.stderr.strip()}")
    (cfg.state_dir / "htpasswd").write_text(line.stdout)
    digest = hashlib.sha256(f"{REGISTRY_USER}:{password}".encode()).hexdigest()
    (cfg.state_dir / "chart-repo.auth").write_text(digest + "\n")
    (cfg.state_dir / "registry.yml").write_text(
        json.dumps(  # JSON is YAML: no YAML writer needed
            {
                "version": 0.1,
                "log": {"level": "info", "accesslog": {"disabled": False}},
                "storage": {
                    "filesystem": {"rootdirectory": str(cfg.state_dir / "registry-data")},
                    "delete": {"enabled": True},
                },
                "http": {
                    "addr": f"127.0.0.1:{cfg.ports['registry']}",
                    "secret": secrets.token_hex(16),
                    "tls": {"certificate": str(pki / "server.crt"), "key": str(pki / "server.key")},
                },
                "auth": {"htpasswd": {"realm": "local-registry", "path": str(cfg.state_dir / "htpasswd")}},
            },
            indent=1,
        )
    )
    commands = {
        "registry": [str(bin_dir / "registry"), "serve", str(cfg.state_dir / "registry.yml")],
        "chart-repo": [
            sys.executable,
            str(Path(__file__).resolve()),
            "serve-chart-repo",
            f"--root={cfg.state_dir / 'charts'}",
            f"--port={cfg.ports['chart-repo']}",
            f"--cert={pki / 'server.crt'}",
            f"--key={pki / 'server.key'}",
            f"--auth-file={cfg.state_dir / 'chart-repo.auth'}",
        ],
    }
    procs: list[Proc] = []
    try:
        for name, args in commands.items():
            procs.append(start_process(cfg, name, args))
        s = Starter(cfg, {p.name: p for p in procs}, t0=t0)
        deadline = t0 + cfg.timeout
        ca = pki / "ca.crt"
        # 401 from both: TLS verifies against our CA and the password is asked for
        s.wait("GET /v2/ 401", "registry", lambda: https_status(cfg.ports["registry"], "/v2/", ca) == 401, deadline)
        s.wait(
            "GET / 401", "chart-repo", lambda: https_status(cfg.ports["chart-repo"], "/index.yaml", ca) == 401, deadline
        )
    except BaseException:
        stop(procs)
        raise
    info = {
        "ports": cfg.ports,
        "oci": f"127.0.0.1:{cfg.ports['registry']}",
        "chart_repo": f"https://127.0.0.1:{cfg.ports['chart-repo']}",
        "chart_dir": str(cfg.state_dir / "charts"),
        "ca_file": str(ca),
        "username": REGISTRY_USER,
        "password_file": str(pw_file),
    }
    (cfg.state_dir / "registry.json").write_text(json.dumps(info, indent=1) + "\n")
    log(f"registries ready in {time.monotonic() - t0:.1f} s: oci://{info['oci']}, {info['chart_repo']}")


def start_process(cfg: Config, name: str, args: list[str]) -> Proc:
    """Start one process in a session of its own, logging to <state>/logs/<name>.log; record its pid."""
    with open(cfg.logs / f"{name}.log", "ab") as logf:
        popen = subprocess.Popen(
            args,
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cfg.state_dir,
            start_new_session=True,
        )
    (cfg.pids / f"{name}.pid").write_text(json.dumps({"pid": popen.pid, "exe": args[0]}) + "\n")
    return Proc(name=name, pid=popen.pid, exe=args[0], popen=popen)


def registry_healthy(cfg: Config) -> bool:
    procs = read_pids(cfg)
    ca = cfg.pki / "ca.crt"
    return (
        {p.name for p in procs} == set(REGISTRY_PORTS)
        and all(p.alive() for p in procs)
        and https_status(cfg.ports["registry"], "/v2/", ca) == 401
        and https_status(cfg.ports["chart-repo"], "/index.yaml", ca) == 401
    )


def registry_down(cfg: Config, locked: bool = False) -> None:
    lock = None if locked else lock_state(cfg)
    try:
        procs = read_pids(cfg)
        stop([p for p in procs if not pid_alive(p.pid) or p.is_ours()])
        if cfg.state_dir.exists():
            if not (cfg.state_dir / STATE_MARKER).is_file():
                raise ClusterError(f"{cfg.state_dir} has no {STATE_MARKER}: not a registry state dir, not removing it")
            shutil.rmtree(cfg.state_dir)
            log(f"removed {cfg.state_dir}")
    finally:
        if lock is not None:
            lock.close()


def serve_chart_repo(root: Path, port: int, cert: Path, key: Path, auth_file: Path) -> None:
    """A static HTTPS server of `root` (index.yaml and chart archives) with one basic-auth user; `public/`
    is served without it (a public chart repository, for GitSyncs, which get no operator credentials).

    Python's http.server rather than a Go static server module: no build, and it is test infrastructure only
    (helm asks it for two kinds of file). The password is known only as sha256("user:password")."""
    expected = auth_file.read_text().strip()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, directory=str(root), **kw)

        def _allowed(self) -> bool:
            if self.path.startswith("/public/"):  # anonymous: for clients that have no credentials (GitSyncs)
                return True
            header = self.headers.get("Authorization", "")
            if header.startswith("Basic "):
                with contextlib.suppress(ValueError):
                    given = hashlib.sha256(base64.b64decode(header[6:], validate=True)).hexdigest()
                    if hmac.compare_digest(given, expected):
                        return True
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="local-chart-repo"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False

        def do_GET(self) -> None:
            if self._allowed():
                super().do_GET()

        def do_HEAD(self) -> None:
            if self._allowed():
                super().do_HEAD()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="state dir (env LOCAL_CLUSTER_DIR; default <repo>/.local-cluster)")
    parser.add_argument(
        "--cache-dir", help="binary cache (env LOCAL_CLUSTER_CACHE; default <repo>/.cache/local-cluster)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get("LOCAL_CLUSTER_TIMEOUT", "90")),
        help="seconds `up` waits for readiness (env LOCAL_CLUSTER_TIMEOUT; default 90)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the binaries (skipped when current); prints the bin dir")
    b.add_argument("--force", action="store_true", help="run go build even when the stamp matches")
    b.add_argument(
        "--with",
        dest="extras",
        action="append",
        choices=sorted([*EXTRAS, "flux"]),
        default=[],
        help="also build an optional tool set (registry: OCI registry for charts; sops: sops and age-keygen; "
        "flux: Flux's source-controller and kustomize-controller, the peer of `make bench-fleet`)",
    )
    u = sub.add_parser("up", help="start the cluster (building first when needed)")
    u.add_argument(
        "--auto-ports",
        action="store_true",
        help="pick free loopback ports instead of the defaults (env LOCAL_CLUSTER_AUTO_PORTS=1)",
    )
    for comp, port in PORTS.items():
        u.add_argument(f"--{comp}-port", type=int, help=f"default {port} (env {PORT_ENV[comp]})")
    sub.add_parser("down", help="stop every process by pid and remove the state dir")
    sub.add_parser("status", help="pid, port and health of each component")
    sub.add_parser("env", help="print the export lines for KUBECONFIG and PATH")
    ru = sub.add_parser(
        "registry-up",
        help="start the OCI registry and the HTTPS chart repository (state: --dir, default <repo>/.local-registry)",
    )
    ru.add_argument("--auto-ports", action="store_true", help="pick free loopback ports instead of 15000 and 15443")
    sub.add_parser("registry-down", help="stop the registries by pid and remove their state dir")
    sub.add_parser("registry-info", help="print <state>/registry.json: addresses, CA file, user, password file")
    serve = sub.add_parser("serve-chart-repo", help="(internal) the chart repository server registry-up starts")
    serve.add_argument("--root", type=Path, required=True)
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--cert", type=Path, required=True)
    serve.add_argument("--key", type=Path, required=True)
    serve.add_argument("--auth-file", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "serve-chart-repo":
            serve_chart_repo(args.root, args.port, args.cert, args.key, args.auth_file)
            return 0
        if args.command.startswith("registry-"):
            rcfg = registry_config(args)
            if args.command == "registry-up":
                registry_up(rcfg)
                sys.stdout.write((rcfg.state_dir / "registry.json").read_text())
            elif args.command == "registry-down":
                registry_down(rcfg)
            elif not (rcfg.state_dir / "registry.json").is_file():
                raise ClusterError(f"no registries in {rcfg.state_dir}: run `cluster.py registry-up` first")
            else:
                sys.stdout.write((rcfg.state_dir / "registry.json").read_text())
            return 0
        cfg = make_config(args)
        if args.command == "build":
            bin_dir = build(cfg.cache_dir, force=args.force)
            for extra in args.extras:
                if extra == "flux":
                    build_flux(cfg.cache_dir, force=args.force)
                else:
                    build_extra(cfg.cache_dir, extra, force=args.force)
            print(bin_dir)
        elif args.command == "up":
            up(cfg)
        elif args.command == "down":
            down(cfg)
        elif args.command == "status":
            return status(cfg)
        elif args.command == "env":
            if not cfg.kubeconfig.is_file():
                raise ClusterError(f"no cluster in {cfg.state_dir}: run `cluster.py up` first")
            sys.stdout.write(cfg.env_lines())
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
