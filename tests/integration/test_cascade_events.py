"""Events in a Namespace: served twice (core `v1` and `events.k8s.io/v1`), judged by the cascade guard zero times.

The API server serves the same Event objects under two groups, so discovery lists two kinds. The guard
ignores both (an Event is nobody's to lose); this checks, against the real server, that neither is listed
or counted, and that everything else in the Namespace still is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gitops_sync.apply import cascade
from gitops_sync.cluster.client import Client
from gitops_sync.cluster.discovery import Discovery
from gitops_sync.resource import ObjectKey
from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster


class _Paths(Client):
    """A real client that remembers every path it sent a GET for."""

    def __init__(self, kubeconfig: Path) -> None:
        super().__init__(kubeconfig)
        self.paths: list[str] = []

    def request_status(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        if method == "GET":
            self.paths.append(path)
        return super().request_status(method, path, **kw)


def test_events_of_both_groups_neither_block_nor_are_listed_by_the_cascade_guard(
    kube: KubeCluster, namespace: str
) -> None:
    kube.kubectl("create", "configmap", "handmade", "-n", namespace)
    event = (
        '{"apiVersion":"v1","kind":"Event","metadata":{"name":"e1"},'
        '"involvedObject":{"kind":"ConfigMap","name":"handmade","namespace":"' + namespace + '"},'
        '"reason":"Test","message":"an event","type":"Normal"}'
    )
    kube.kubectl("create", "-n", namespace, "-f", "-", input=event)
    client = _Paths(kube.kubeconfig)
    with client:
        discovery = Discovery(client)
        served = {(i.group, i.kind) for i in discovery.namespaced_listable() if i.kind == "Event"}
        assert served == {("", "Event"), ("events.k8s.io", "Event")}, served
        held = cascade.namespace_holdings(client, discovery, namespace, ())
        mine = ObjectKey("", "ConfigMap", namespace, "handmade")
        deleted_too = cascade.namespace_holdings(client, discovery, namespace, {mine})
    assert held.foreign == [mine] and not held.unchecked, held
    assert not deleted_too, "an Event (of either group) alone never blocks a Namespace's prune"
    assert not [p for p in client.paths if p.endswith("/events")], "no Event list was sent"
