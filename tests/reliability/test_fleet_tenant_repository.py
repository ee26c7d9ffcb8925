"""A tenant naming another tenant's clone in the fleet's clone cache (issue 20, item 8), on the real API server.

Tenant A's GitSync fetches A's private repository (a Secret in it) into the clone cache, at a path anyone
can compute: `<cache>/<sha256(url)[:24]>/repo.git` and `.../trees/<sha>`. Tenant B then points GitSyncs
at that clone in every spelling a tenant has — the bare clone, the materialised commit, a `file://` URL, a
symlink, a parent of the cache with `spec.path` into it — and at a symlink to a directory of its own,
turned into the cache once B's source has loaded (then back). The allow-list names a directory that holds the
cache, the worst set-up an operator could choose. Every attempt must be refused with Ready=False, reason
RepositoryNotAllowed and a Warning Event, and nothing of A may reach B's namespace.

The allow-list comes through GITOPS_SYNC_ALLOW_LOCAL_REPOSITORY, which an older controller ignores: run
against one, the same test starts, and fails on A's Secret applied into B's namespace.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_established, wait_until
from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD = REPO_ROOT / "deploy" / "kubernetes" / "crd" / "gitsyncs.gitops-sync.io.yaml"
MARKER = "tenant-a-only-5e0c93"
REASON = "RepositoryNotAllowed"


def _secret(name: str, value: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"k": value}})


def _gitsync(name: str, namespace: str, repository: str, **spec: Any) -> str:
    body = {"repository": repository, "interval": "1s", "prune": True, **spec}
    doc = {
        "apiVersion": "gitops-sync.io/v1alpha1",
        "kind": "GitSync",
        "metadata": {"name": name, "namespace": namespace},
    }
    return json.dumps({**doc, "spec": body}) + "\n"


def _ready(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    conditions = (kube.get("gitsync", name, namespace).get("status") or {}).get("conditions") or []
    return next((dict(c) for c in conditions if c.get("type") == "Ready"), {})


def _leaks(kube: KubeCluster, namespace: str) -> list[str]:
    """Every Secret or ConfigMap of `namespace` holding tenant A's marker (a Secret's base64 decoded)."""
    items = kube.list("secrets", namespace) + kube.list("configmaps", namespace)
    found = []
    for obj in items:
        values = list((obj.get("data") or {}).values())
        if obj["kind"] == "Secret":
            values = [base64.b64decode(v).decode(errors="replace") for v in values]
        if any(MARKER in v for v in values):
            found.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return found


def _point(link: Path, target: Path) -> None:
    """Turn `link` to `target` in one step (a new symlink renamed over it): no fetch sees it missing."""
    new = link.with_name(f".{link.name}.new")
    new.symlink_to(target)
    os.replace(new, link)


def _settled(kube: KubeCluster, namespace: str, name: str, quiet: float) -> bool:
    """True once the GitSync's resourceVersion stayed the same for `quiet` seconds."""

    def version() -> str:
        return str(kube.get("gitsync", name, namespace)["metadata"]["resourceVersion"])

    first = version()
    time.sleep(quiet)
    return version() == first


def _refused_events(kube: KubeCluster, namespace: str) -> set[str]:
    return {
        e["involvedObject"]["name"]
        for e in kube.list("events", namespace, fields=f"reason={REASON}")
        if e["involvedObject"].get("kind") == "GitSync" and e.get("type") == "Warning"
    }


def test_a_tenant_never_reads_another_tenants_clone(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(kube.env, "gitsyncs.gitops-sync.io")
    theirs = f"{namespace}-b"[:63]  # tenant B's namespace
    kube.kubectl("create", "namespace", theirs)
    repos, cache = tmp_path / "repos", tmp_path / "cache"
    a = GitRepo(
        repos / "tenant-a", {"secret.yaml": _secret("a-private", MARKER), "cm.yaml": configmap("a-cm", {"k": MARKER})}
    )
    url, sha = f"file://{a.path}", a.repo.head.commit.hexsha
    clone = cache / hashlib.sha256(url.encode()).hexdigest()[:24]  # as predictable as it gets
    b_own = GitRepo(repos / "tenant-b-1", {"cm.yaml": configmap("b-cm", {"k": "b"})})
    b_link = repos / "tenant-b"  # B's repository: a symlink to its current directory, as deploy trees often are
    b_link.symlink_to(b_own.path)
    (repos / "shortcut").symlink_to(clone)
    env = {**kube.env, "GITOPS_SYNC_ALLOW_LOCAL_REPOSITORY": str(tmp_path)}  # holds the cache: still refused
    args = ["--watch-namespace", namespace, "--cache-dir", str(cache), "--resync", "2"]
    try:
        with Daemon(args, env, tmp_path / "fleet.log") as d:
            d.wait_ready(60)
            kube.kubectl("apply", "-f", "-", input=_gitsync("a", namespace, url))
            kube.kubectl("wait", "--for=condition=Ready", "gitsync/a", "-n", namespace, "--timeout=60s", timeout=70)
            assert (clone / "trees" / sha / "secret.yaml").is_file()  # A's clone is where B will look
            before = sorted(p.name for p in cache.iterdir())
            attempts = {
                "b-bare": (str(clone / "repo.git"), {"revision": "main"}),
                "b-tree": (str(clone / "trees" / sha), {}),
                "b-file-url": (f"file://{clone}/repo.git", {"revision": "main"}),
                "b-symlink": (str(repos / "shortcut" / "repo.git"), {"revision": "main"}),
                "b-parent": (str(tmp_path), {"path": f"cache/{clone.name}/trees/{sha}"}),
            }
            kube.kubectl(
                "apply",
                "-f",
                "-",
                input="---\n".join(
                    _gitsync(n, namespace, r, targetNamespace=theirs, **extra) for n, (r, extra) in attempts.items()
                ),
            )

            def refused() -> bool:
                assert not _leaks(kube, theirs), "tenant A's objects reached tenant B's namespace"
                return all(_ready(kube, namespace, n).get("reason") == REASON for n in attempts)

            took = wait_until("every attempt refused", refused, 60, interval=0.2)
            for name, (repository, _) in attempts.items():
                cond = _ready(kube, namespace, name)
                assert cond["status"] == "False" and repository in cond["message"], (name, cond)
            wait_until("a Warning Event per attempt", lambda: set(attempts) <= _refused_events(kube, namespace), 30)

            # B's own repository, allowed and loaded; then its link is turned into the cache.
            kube.kubectl("apply", "-f", "-", input=_gitsync("b-swap", namespace, str(b_link), targetNamespace=theirs))
            kube.kubectl(
                "wait", "--for=condition=Ready", "gitsync/b-swap", "-n", namespace, "--timeout=60s", timeout=70
            )
            # Swapped only once nothing writes the GitSync any more: no event of it can reach the controller
            # first, so what refuses it is the check every fetch makes (not the one at load).
            wait_until("b-swap's status settled", lambda: _settled(kube, namespace, "b-swap", 3.0), 60, interval=0)
            _point(b_link, clone / "trees" / sha)
            t1 = time.monotonic()
            wait_until(
                "the swapped directory refused at its next fetch",
                lambda: _ready(kube, namespace, "b-swap").get("reason") == REASON and not _leaks(kube, theirs),
                30,
                interval=0.2,
            )
            swap_took = time.monotonic() - t1
            at_fetch = [
                e
                for e in d.logged("source failed; keeping the last good state")
                if e.get("gitsync", "").endswith("/b-swap") and "not allowed" in str(e.get("error"))
            ]
            assert at_fetch, "the swapped directory was not refused by the fetch"
            wait_until("its Warning Event", lambda: "b-swap" in _refused_events(kube, namespace), 30)
            time.sleep(3)  # a few more polls and a resync: still nothing of A's
            leaks = _leaks(kube, theirs)
            kept = kube.find("configmap", "b-cm", theirs) is not None
            # B's link leads to its own directory again: loaded again at its interval, the GitSync untouched.
            _point(b_link, b_own.path)
            back = wait_until(
                "b-swap Ready again",
                lambda: _ready(kube, namespace, "b-swap").get("status") == "True",
                30,
                interval=0.2,
            )
            after = sorted(p.name for p in cache.iterdir())
            inventories = kube.list("configmaps", namespace)
            log = d.log_path.read_text(errors="replace")
        assert leaks == [] and kube.find("secret", "a-private", theirs) is None
        assert kept, "the last good state of b-swap (its own ConfigMap) stays applied"
        assert after == before, f"a refused source reached the clone cache: {before} -> {after}"
        parents = {o["metadata"]["name"] for o in inventories}
        assert not {f"gitsync-{n}" for n in attempts} & parents, "a refused source got an inventory"
        assert "Traceback" not in log
    finally:
        kube.kubectl("delete", "namespace", theirs, "--wait=false", check=False)
    reliability.record(
        area="fleet",
        fault=(
            "tenant B points GitSyncs at tenant A's clone in the clone cache (a Secret in it): the bare clone, "
            "the materialised commit, a file:// URL, a symlink, a parent of the cache with spec.path into it "
            "(the allow-list holding the cache); and its own allowed symlink turned into the cache after it "
            "loaded, then back"
        ),
        outcome=(
            f"every attempt Ready=False reason {REASON} naming the repository, a Warning Event each; the "
            "swapped directory refused at its next fetch, its last good state kept, loaded again at its interval "
            "once the directory was back; no traceback"
        ),
        checked=(
            "no object of A in B's namespace (the marker in no Secret or ConfigMap there), no inventory for a "
            "refused source, nothing new in the clone cache"
        ),
        figures=(
            f"{len(attempts)} spellings refused {took:.1f} s after they were created; swap refused after "
            f"{swap_took:.1f} s, Ready again {back:.1f} s after the directory came back; 0 objects of A in B's "
            "namespace; 0 new cache directories"
        ),
    )
