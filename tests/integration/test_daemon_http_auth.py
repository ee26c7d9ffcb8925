"""--http-auth kubernetes against the real API server: TokenReview + SubjectAccessReview with real tokens.

The daemon runs as deploy/kubernetes's own ServiceAccount (its rendered RBAC, relocated into the test
namespace), so the test also proves those rules suffice. Scrapers are ServiceAccounts with tokens from
`kubectl create token`. TokenReview and SubjectAccessReview are cluster-scoped: every ClusterRole and
ClusterRoleBinding here carries the namespace in its name and is deleted afterwards.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from daemon_support import Daemon, GitRepo, as_list, configmap, relocate, rendered, sa_kubeconfig, wait_until

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.runtime.auth import KubernetesAuth
from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster


def fetch(port: int, path: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


def token(kube: KubeCluster, ns: str, sa: str) -> str:
    return kube.kubectl("create", "token", sa, "-n", ns, "--duration=1h").stdout.strip()


def test_status_and_metrics_need_a_token_allowed_by_rbac(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    suffix = f"-{namespace}"
    docs = relocate(rendered(kube, "namespaced"), namespace, suffix)
    rbac = [
        d for d in docs if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
    ]
    reader_role = f"gitops-sync-metrics-reader{suffix}"
    assert reader_role in {d["metadata"]["name"] for d in rbac}
    scraper_binding, late_binding = f"t-scraper{suffix}", f"t-late{suffix}"
    kube.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", input=as_list(rbac))
    try:
        for sa in ("scraper", "stranger"):
            kube.kubectl("create", "serviceaccount", sa, "-n", namespace)
        kube.kubectl(
            "create",
            "clusterrolebinding",
            scraper_binding,
            f"--clusterrole={reader_role}",
            f"--serviceaccount={namespace}:scraper",
        )
        scraper, stranger = token(kube, namespace, "scraper"), token(kube, namespace, "stranger")
        kubeconfig = sa_kubeconfig(kube, namespace, tmp_path / "sa.kubeconfig")
        repo = GitRepo(tmp_path / "repo", {"cm.yaml": configmap("cm", {"v": "1"})})
        env = {**kube.env, "KUBECONFIG": str(kubeconfig)}
        with Daemon(
            ["--repo", str(repo.path), "-n", namespace, "--http-auth", "kubernetes"], env, tmp_path / "daemon.log"
        ) as d:
            d.wait_ready()  # /readyz is open: the kubelet has no token
            assert fetch(d.port, "/healthz")[0] == 200 and fetch(d.port, "/readyz")[0] == 200
            assert d.logged("daemon started")[0]["http_auth"] == "kubernetes"

            seen = {}
            firsts: list[float] = []
            for path in ("/metrics", "/status"):
                seen[path, "none"] = fetch(d.port, path)[0]
                seen[path, "garbage"] = fetch(d.port, path, "not-a-token")[0]
                seen[path, "stranger"] = fetch(d.port, path, stranger)[0]
                t0 = time.monotonic()
                code, body = fetch(d.port, path, scraper)
                seen[path, "scraper"] = code
                firsts.append(time.monotonic() - t0)
                assert code == 200, body
                t0 = time.monotonic()
                assert fetch(d.port, path, scraper)[0] == 200
                cached = time.monotonic() - t0
            assert seen == {
                (p, who): code
                for p in ("/metrics", "/status")
                for who, code in (("none", 401), ("garbage", 401), ("stranger", 403), ("scraper", 200))
            }
            code, body = fetch(d.port, "/status", stranger)
            assert f"system:serviceaccount:{namespace}:stranger" in body.decode() and "/status" in body.decode()
            assert fetch(d.port, "/", scraper)[0] == 200  # the reader role names /metrics, /status and / (the page)
            assert fetch(d.port, "/other", scraper)[0] == 403  # and nothing else
            assert scraper not in d.log_path.read_text() and stranger not in d.log_path.read_text()

            # RBAC granted later takes effect once the denial's 10 s cache entry expires
            kube.kubectl(
                "create",
                "clusterrolebinding",
                late_binding,
                f"--clusterrole={reader_role}",
                f"--serviceaccount={namespace}:stranger",
            )
            took = wait_until(
                "the new binding to be honoured",
                lambda: fetch(d.port, "/metrics", stranger)[0] == 200,
                20.0,
                interval=0.5,
            )
            assert took <= 12.0
            assert d.stop() == 0
    finally:
        for name in (scraper_binding, late_binding):
            kube.kubectl("delete", "clusterrolebinding", name, "--ignore-not-found", check=False)
        for dd in rbac:
            if dd["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                kube.kubectl("delete", dd["kind"].lower(), dd["metadata"]["name"], "--ignore-not-found", check=False)
    print(
        f"first authorised request {firsts[0] * 1000:.0f} ms, cached {cached * 1000:.0f} ms; "
        f"new binding honoured after {took:.1f} s"
    )


def test_reviews_are_cached_per_token_and_path(kube: KubeCluster, namespace: str) -> None:
    """Two API requests (TokenReview, SubjectAccessReview) per token and path per TTL, not per scrape."""
    kube.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    tok = token(kube, namespace, "reader")
    with Client(kube.kubeconfig) as client:
        auth = KubernetesAuth(client)
        decisions = [auth.check("/metrics", f"Bearer {tok}").status for _ in range(5)]
        assert decisions == [403] * 5  # authenticated, not authorised
        assert client.stats.writes == 2
        assert auth.check("/status", f"Bearer {tok}").status == 403
        assert client.stats.writes == 3  # the token's review is reused, the new path asks once
        assert auth.check("/metrics", "Bearer garbage").status == 401
        assert auth.check("/metrics", "Bearer garbage").status == 401
        assert client.stats.writes == 4  # an invalid token is remembered too: one TokenReview


def test_a_daemon_without_review_rights_answers_503_naming_the_role(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """A missing gitops-sync-auth binding is the operator's problem, not the caller's: 503, never 200 or 401."""
    kube.kubectl("create", "serviceaccount", "gitops-sync", "-n", namespace)  # no bindings at all
    kube.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    with Client(sa_kubeconfig(kube, namespace, tmp_path / "sa.kubeconfig")) as client:
        decision = KubernetesAuth(client).check("/metrics", f"Bearer {token(kube, namespace, 'reader')}")
    assert decision.status == 503, decision
    assert "tokenreviews" in decision.reason and "gitops-sync-auth" in decision.reason
