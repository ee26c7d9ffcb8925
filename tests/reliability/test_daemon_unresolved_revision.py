"""A new revision the daemon cannot resolve because an API request fails: no prune against the old one.

The daemon keeps acting on its last good desired state when a new revision fails to load. When the new
revision rendered fine but resolving it against the cluster failed (discovery answering 503, as an
overloaded API server or a broken aggregated API can), the old state is no longer what Git wants: an
object only the new revision has (applied meanwhile by `gitops-sync sync`, or by another replica) is a
member of the inventory, and a full pass pruning against the old state would delete it. In-process daemon
(its passes are driven directly) on the shared local control plane; the fault is injected in its client.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.daemon.process.controller import DaemonOptions
from gitops_sync.daemon.reconcile.reporter import FULL, SOURCE
from gitops_sync.daemon.single.controller import Daemon as InProcessDaemon
from gitops_sync.engine import PassOptions, SourceOptions
from gitops_sync.errors import ApiError
from tests.conftest import KubeCluster
from tests.integration.daemon_support import GitRepo, configmap
from tests.integration.test_sync import gs
from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster


def _exists(kube: KubeCluster, namespace: str, name: str) -> bool:
    return kube.find("configmap", name, namespace) is not None


def test_a_revision_that_fails_to_resolve_never_prunes_against_the_previous_one(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    repo = GitRepo(tmp_path / "repo", {"a.yaml": configmap("a", {"v": "1"})})
    opts = DaemonOptions(
        source=SourceOptions(repo=str(repo.path)),
        pass_opts=PassOptions(namespace=namespace, prune=True),
        kubeconfig=kube.kubeconfig,
        http_addr="127.0.0.1:0",
        debounce=0.05,
    )
    daemon = InProcessDaemon(opts)
    src = daemon.source
    failing: list[str] = []
    real = daemon.client.request_status

    def discovery_fails(method: str, path: str, **kw: Any) -> tuple[int, Any]:
        if failing and method == "GET" and path in ("/api", "/apis"):
            failing.append(path)
            raise ApiError(
                503, "ServiceUnavailable", "the server is unable to handle the request", method=method, path=path
            )
        return real(method, path, **kw)

    daemon.client.request_status = discovery_fails  # type: ignore[method-assign]

    def refresh() -> None:
        """A poll of Git: the second read after the quiet period acts on a new render."""
        for _ in range(3):
            src.handle({SOURCE})
            daemon.queue.forget(SOURCE)
            time.sleep(0.1)

    try:
        refresh()
        assert src.current is not None and _exists(kube, namespace, "a"), "revision A applied"
        rev_a = src.current.checkout.revision
        rev_b = repo.commit({"b.yaml": configmap("b", {"v": "1"})}, "B adds b")
        # An operator (or another replica) applies B while this daemon cannot resolve it.
        assert gs(kube, "sync", "--repo", str(repo.path), "-n", namespace).returncode == 0
        assert _exists(kube, namespace, "b")
        failing.append("on")
        refresh()
        assert len(failing) > 1, "discovery was asked and failed"
        assert src.current is not None and src.current.checkout.revision == rev_a, "the last good state kept"
        src.handle({FULL})  # the periodic resync: a full pass on the state it holds
        doc = src.changeset_doc(daemon.cluster_condition)
        failing.clear()  # discovery answers again: B resolves, and the error goes
        refresh()
        assert src.current is not None and src.current.checkout.revision == rev_b
        after = src.changeset_doc(daemon.cluster_condition)
    finally:
        daemon.cache.stop()
        daemon.queue.shutdown()
    assert _exists(kube, namespace, "b"), "b (wanted by revision B) was pruned by a pass against revision A"
    errors = " ".join(doc["errors"])
    assert rev_b[:7] in errors and "503" in errors and "prune" in errors, doc["errors"]
    assert not any("not resolved" in e for e in after["errors"]), after["errors"]
    reliability.record(
        area="API server",
        fault="discovery answers 503 while the daemon resolves a new revision (B adds a ConfigMap, applied "
        "meanwhile by gitops-sync sync); a full pass runs on the kept revision A",
        outcome="the daemon keeps A, holds prune, and its /status errors name revision B and the API error; "
        "once discovery answers, B is loaded and the error clears",
        checked="the ConfigMap only revision B has was not pruned",
    )
