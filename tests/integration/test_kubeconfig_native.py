"""cluster/kubeconfig.py: the common kubeconfigs are read without the official client, against the real API
server (TLS with the cluster's CA, client certificates from data and from files, merged $KUBECONFIG lists);
everything else still goes to the official loader."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync.cluster.client import Client
from gitops_sync.cluster.kubeconfig import connect
from gitops_sync.errors import ClusterError
from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster


def _config(kube: KubeCluster) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(Path(kube.kubeconfig).read_text())
    return doc


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def test_certificate_data_kubeconfig_is_read_natively(kube: KubeCluster, tmp_path: Path) -> None:
    path = _write(tmp_path / "config", _config(kube))
    with Client(path) as c:
        assert c._conn.loader == "native"
        assert c.get("/version")["gitVersion"].startswith("v")


def test_certificate_files_relative_to_the_kubeconfig(kube: KubeCluster, tmp_path: Path) -> None:
    """`client-certificate`/`client-key`/`certificate-authority` as files, relative to the kubeconfig's directory."""
    doc = _config(kube)
    (tmp_path / "pki").mkdir()
    user, cluster = doc["users"][0]["user"], doc["clusters"][0]["cluster"]
    for key, name in (("client-certificate", "c.pem"), ("client-key", "k.pem")):
        (tmp_path / "pki" / name).write_bytes(base64.b64decode(user.pop(f"{key}-data")))
        user[key] = f"pki/{name}"
    (tmp_path / "pki" / "ca.pem").write_bytes(base64.b64decode(cluster.pop("certificate-authority-data")))
    cluster["certificate-authority"] = "pki/ca.pem"
    path = _write(tmp_path / "config", doc)
    with Client(path) as c:
        assert c._conn.loader == "native"
        assert c.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"


def test_a_kubeconfig_list_merges_with_the_first_file_winning(
    kube: KubeCluster, tmp_path: Path, monkeypatch: Any
) -> None:
    """$KUBECONFIG=a:b — contexts from b, current-context from a, as kubectl merges them."""
    doc = _config(kube)
    first = _write(tmp_path / "a", {"apiVersion": "v1", "kind": "Config", "current-context": doc["current-context"]})
    second = _write(tmp_path / "b", {**doc, "current-context": "elsewhere"})
    monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{second}")
    with Client() as c:
        assert c._conn.loader == "native"
        assert c.get("/version")


def test_wrong_ca_fails_the_tls_handshake(kube: KubeCluster, tmp_path: Path) -> None:
    """The native reader verifies the server: a CA that did not sign it is refused (not skipped)."""
    doc = _config(kube)
    doc["clusters"][0]["cluster"]["certificate-authority-data"] = doc["users"][0]["user"]["client-certificate-data"]
    path = _write(tmp_path / "config", doc)
    with Client(path, timeout=5) as c, pytest.raises(ClusterError):
        c.get("/version")


def test_exec_plugins_and_unknown_keys_go_to_the_official_loader(kube: KubeCluster, tmp_path: Path) -> None:
    doc = _config(kube)
    doc["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}}
    assert connect(_write(tmp_path / "exec", doc), None, 1).loader == "official"
    doc = _config(kube)
    doc["clusters"][0]["cluster"]["proxy-url"] = "http://127.0.0.1:1"
    assert connect(_write(tmp_path / "proxy", doc), None, 1).loader == "official"


def test_errors_are_worded_by_the_official_loader(tmp_path: Path) -> None:
    """A context that does not exist: the native reader steps aside and the usual message comes out."""
    path = _write(tmp_path / "config", {"apiVersion": "v1", "kind": "Config", "contexts": [], "clusters": []})
    with pytest.raises(ClusterError, match="cannot load kubeconfig"):
        Client(path, context="missing")
