"""Discovery names the group-versions it could not read, so the cascade guard never takes them as empty."""

from __future__ import annotations

from gitops_sync.apply import cascade
from gitops_sync.cluster.discovery import Discovery
from tests.unit.fakes import FakeApi, fake_client, status_body


def _version(version: str, freshness: str, kinds: list[str]) -> dict[str, object]:
    resources = [
        {"resource": k.lower() + "s", "responseKind": {"kind": k}, "scope": "Namespaced", "verbs": ["list"]}
        for k in kinds
    ]
    return {"version": version, "freshness": freshness, "resources": resources}


def test_a_stale_group_version_of_aggregated_discovery_is_unavailable() -> None:
    api = FakeApi()
    api.on("GET", "/api", {"kind": "APIGroupDiscoveryList", "items": [{"versions": [_version("v1", "Current", [])]}]})
    items = [
        {"metadata": {"name": "metrics.example"}, "versions": [_version("v1beta1", "Stale", [])]},
        {"metadata": {"name": "apps"}, "versions": [_version("v1", "Current", ["Deployment"])]},
    ]
    api.on("GET", "/apis", {"kind": "APIGroupDiscoveryList", "items": items})
    d = Discovery(fake_client(api))
    assert d.unavailable() == ("metrics.example/v1beta1",)
    assert d.lookup("apps/v1", "Deployment") is not None
    held = cascade.namespace_holdings(fake_client(FakeApi(default=(200, {"items": [], "metadata": {}}))), d, "t", ())
    assert held and held.unchecked == ["the kinds of metrics.example/v1beta1 (not discovered: its API is unavailable)"]


def test_a_group_version_the_legacy_walk_cannot_read_is_unavailable() -> None:
    api = FakeApi()
    api.on("GET", "/api", {"kind": "APIVersions", "versions": ["v1"]})
    groups = [
        {
            "name": g,
            "versions": [{"groupVersion": f"{g}/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": f"{g}/v1"},
        }
        for g in ("apps", "metrics.example")
    ]
    api.on("GET", "/apis", {"kind": "APIGroupList", "groups": groups})
    api.on("GET", "/api/v1", {"resources": [{"name": "pods", "kind": "Pod", "namespaced": True, "verbs": ["list"]}]})
    api.on("GET", "/apis/apps/v1", {"resources": []})
    api.on("GET", "/apis/metrics.example/v1", (503, status_body(503, "ServiceUnavailable")))
    d = Discovery(fake_client(api))
    assert d.unavailable() == ("metrics.example/v1",)
    assert d.lookup("v1", "Pod") is not None
