"""An OCI artifact as the source (`--repo oci://host/repository:tag` or `@sha256:…`), pushed to the real registry
on loopback in Flux's `flux push artifact` layout by a small helper (OCI distribution API: blob uploads, then the
manifest), synced into the real cluster; the manifest digest is the revision, a re-pushed tag is a new one.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import ssl
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from chart_registries import Registries

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, configmap, wait_established, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

FLUX_CONFIG = "application/vnd.cncf.flux.config.v1+json"
FLUX_LAYER = "application/vnd.cncf.flux.content.v1.tar+gzip"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _request(registries: Registries, method: str, url: str, body: bytes = b"", ctype: str = "") -> Any:
    auth = base64.b64encode(f"{registries.username}:{registries.password}".encode()).decode()
    req = urllib.request.Request(url, data=body if method != "GET" else None, method=method)
    req.add_header("Authorization", f"Basic {auth}")
    if ctype:
        req.add_header("Content-Type", ctype)
    ctx = ssl.create_default_context(cafile=str(registries.ca_file))
    return urllib.request.urlopen(req, context=ctx, timeout=30)


def push_artifact(registries: Registries, name: str, tag: str, files: dict[str, str]) -> str:
    """What `flux push artifact` writes: a tar.gz of the files as the one layer, Flux's config media type, the
    source annotations; returns the manifest's digest."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    base = f"https://{registries.oci}/v2/{name}"
    blobs = []
    for data, media in ((b"{}", FLUX_CONFIG), (buf.getvalue(), FLUX_LAYER)):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        with _request(registries, "POST", f"{base}/blobs/uploads/") as r:
            location = r.headers["Location"]
        if location.startswith("/"):
            location = f"https://{registries.oci}{location}"
        sep = "&" if "?" in location else "?"
        _request(registries, "PUT", f"{location}{sep}digest={digest}", data, "application/octet-stream").close()
        blobs.append({"mediaType": media, "digest": digest, "size": len(data)})
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": blobs[0],
        "layers": [blobs[1]],
        "annotations": {"org.opencontainers.image.source": "https://git.example.invalid/apps.git"},
    }
    body = json.dumps(manifest).encode()
    _request(registries, "PUT", f"{base}/manifests/{tag}", body, MANIFEST).close()
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _sync(registries: Registries, kube: KubeCluster, url: str, namespace: str, tmp_path: Path) -> tuple[int, Any]:
    env = {k: v for k, v in kube.env.items() if not k.startswith("GITOPS_SYNC_")}
    env["GITOPS_SYNC_CHART_CREDENTIALS"] = str(registries.credentials_file(tmp_path / "creds.json"))
    cmd = [sys.executable, "-m", "gitops_sync", "sync", "--repo", url, "-n", namespace, "--prune", "-o", "json"]
    cmd += ["--cache-dir", str(tmp_path / "cache")]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)
    doc = json.loads(r.stdout) if r.stdout.startswith("{") else {"errors": [r.stderr]}
    return r.returncode, doc


def test_sync_of_an_oci_artifact_by_tag_and_by_digest(
    registries: Registries, kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    name = f"artifacts/{namespace}"
    v1 = push_artifact(registries, name, "live", {"apps/cm.yaml": configmap("settings", {"v": "1"})})
    url = f"oci://{registries.oci}/{name}:live"
    code, doc = _sync(registries, kube, url, namespace, tmp_path)
    assert code == 0, doc
    assert doc["revision"] == v1 and doc["source"] == url
    assert kube.get("configmap", "settings", namespace)["data"] == {"v": "1"}
    # The tag moves: a new revision, applied (the inventory is the repository's, whatever the tag).
    v2 = push_artifact(registries, name, "live", {"apps/cm.yaml": configmap("settings", {"v": "2"})})
    code, doc = _sync(registries, kube, url, namespace, tmp_path)
    assert code == 0 and doc["revision"] == v2 != v1, doc
    assert kube.get("configmap", "settings", namespace)["data"] == {"v": "2"}
    # Pinned by digest: exactly that manifest's content (served from the cache: no layer fetched again).
    code, doc = _sync(registries, kube, f"oci://{registries.oci}/{name}@{v1}", namespace, tmp_path)
    assert code == 0 and doc["revision"] == v1, doc
    assert kube.get("configmap", "settings", namespace)["data"] == {"v": "1"}


def test_a_hostile_or_missing_artifact_is_exit_2(
    registries: Registries, kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    name = f"artifacts/{namespace}"
    push_artifact(registries, name, "evil", {"../escape.yaml": configmap("x", {"a": "b"})})
    code, doc = _sync(registries, kube, f"oci://{registries.oci}/{name}:evil", namespace, tmp_path)
    assert code == 2 and "path leaving its directory" in " ".join(doc["errors"]), doc
    assert doc["source"] == f"oci://{registries.oci}/{name}:evil"
    code, doc = _sync(registries, kube, f"oci://{registries.oci}/{name}:nope", namespace, tmp_path)
    assert code == 2 and "not found" in " ".join(doc["errors"]), doc
    assert registries.password not in json.dumps(doc)


def test_the_daemon_polls_the_tag_and_reports_the_digest(
    registries: Registries, kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    name = f"artifacts/{namespace}-d"
    v1 = push_artifact(registries, name, "live", {"cm.yaml": configmap("settings", {"v": "1"})})
    env = {k: v for k, v in kube.env.items() if not k.startswith("GITOPS_SYNC_")}
    env["GITOPS_SYNC_CHART_CREDENTIALS"] = str(registries.credentials_file(tmp_path / "creds.json"))
    args = ["--repo", f"oci://{registries.oci}/{name}:live", "-n", namespace, "--interval", "0.5"]
    args += ["--cache-dir", str(tmp_path / "cache")]
    with Daemon(args, env, tmp_path / "daemon.log") as d:
        d.wait_ready(60)
        wait_until("v1 applied", lambda: d.status()["daemon"]["appliedRevision"] == v1, 60)
        assert kube.get("configmap", "settings", namespace)["data"] == {"v": "1"}
        v2 = push_artifact(registries, name, "live", {"cm.yaml": configmap("settings", {"v": "2"})})
        wait_until("v2 applied", lambda: d.status()["daemon"]["appliedRevision"] == v2, 60)
        assert kube.get("configmap", "settings", namespace)["data"] == {"v": "2"}
        assert registries.password not in (tmp_path / "daemon.log").read_text()
    assert os.path.isdir(tmp_path / "cache" / "artifacts")


def test_a_gitsync_artifact_is_fetched_only_when_the_controller_allows_it(
    registries: Registries, kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """A tenant's spec.repository oci://… is held to the controller's --allow-chart-repository: refused with
    reason ChartRepositoryNotAllowed before any request; allowed, the registry is asked (and, GitSyncs having no
    credentials yet, answers that it requires them)."""
    from tests.integration.test_fleet import CRD, condition, fleet_args, gitsync

    allowed = f"artifacts/{namespace}-ok"
    refused = f"artifacts/{namespace}-no"
    for name in (allowed, refused):
        push_artifact(registries, name, "live", {"cm.yaml": configmap("settings", {"v": "1"})})
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(kube.env, "gitsyncs.gitops-sync.io", 60)
    docs = [
        gitsync("ok", namespace, tmp_path, repository=f"oci://{registries.oci}/{allowed}:live"),
        gitsync("no", namespace, tmp_path, repository=f"oci://{registries.oci}/{refused}:live"),
    ]
    kube.kubectl("apply", "-f", "-", input="---\n".join(docs))
    env = {k: v for k, v in kube.env.items() if not k.startswith("GITOPS_SYNC_")}
    env["SSL_CERT_FILE"] = str(registries.ca_file)
    args = fleet_args(namespace, tmp_path, "--allow-chart-repository", f"oci://{registries.oci}/{allowed}")
    with Daemon([*args, "--cache-dir", str(tmp_path / "cache")], env, tmp_path / "fleet.log") as d:
        d.wait_ready(60)

        def ready(name: str) -> dict[str, Any]:
            return condition(kube, namespace, name, "Ready")

        wait_until("no refused", lambda: ready("no").get("reason") == "ChartRepositoryNotAllowed", 60)
        assert f"oci://{registries.oci}/{refused}" in ready("no")["message"]
        wait_until("ok tried", lambda: "requires credentials" in str(ready("ok").get("message")), 60)
        assert ready("ok")["reason"] == "SourceFailed"
