"""The list/watch loop against the real API server: a real 410 Gone, then a relist and a watch that sees changes.

A watch from a resourceVersion older than the API server's watch window is answered 410 Expired ("too old
resource version"). A custom resource defined here has a window that starts when its CRD is established,
so resourceVersion 1 is always too old for it, whatever the cluster's age: the 410 is the server's, not a fake.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.runtime.listwatch import Callbacks, ListWatch, Query
from gitops_sync.errors import NotFoundError
from tests.conftest import CRDS, KubeCluster
from tests.integration.daemon_support import wait_until


class Recording(Client):
    """The real client, remembering the resourceVersion each watch started from."""

    watched_from: list[str]

    def stream_lines(self, path: str, *, query: Query | None = None, timeout: float | None = None) -> Iterator[bytes]:
        self.watched_from.append(str((query or {}).get("resourceVersion")))
        return super().stream_lines(path, query=query, timeout=timeout)


def _crd(group: str) -> dict[str, Any]:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"probes.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "probes", "singular": "probe", "kind": "Probe"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


@CRDS
def test_a_watch_from_a_too_old_version_gets_a_real_410_and_the_loop_relists_and_follows(
    kube: KubeCluster, namespace: str
) -> None:
    group = f"lw-{uuid.uuid4().hex[:8]}.example.com"
    client = Recording(str(kube.kubeconfig))
    client.watched_from = []
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    client.request("POST", crds, body=_crd(group))
    path = f"/apis/{group}/v1/namespaces/{namespace}/probes"
    lists: list[tuple[list[str], str]] = []
    changes: list[tuple[str, str]] = []
    restarts: list[str] = []
    loop = ListWatch(
        client,
        path,
        Callbacks(
            listed=lambda items, rv: lists.append(([i["metadata"]["name"] for i in items], rv)),
            changed=lambda t, o: changes.append((t, o["metadata"]["name"])),
            restarted=restarts.append,
        ),
        api_version=f"{group}/v1",
        kind="Probe",
        resource_version="1",  # resume from a version long compacted away for this resource
        watch_timeout=(5, 5),  # so the loop ends soon after stop()
    )
    thread = threading.Thread(target=loop.run, daemon=True)
    try:
        wait_until("the Probe kind served", lambda: _served(client, path), 30, 0.2)
        # The server itself answers 410 for this version (an ERROR event in the stream).
        query: Query = {"watch": True, "resourceVersion": "1", "timeoutSeconds": 5}
        first = json.loads(next(iter(client.stream_lines(path, query=query, timeout=15))))
        assert first["type"] == "ERROR" and first["object"]["code"] == 410, first
        client.watched_from.clear()
        thread.start()
        wait_until("a relist after the 410", lambda: bool(lists), 30, 0.05)
        assert restarts[0] == "gone", restarts
        assert client.watched_from[0] == "1"
        assert lists[0][0] == []
        wait_until("a watch from the new list's version", lambda: len(client.watched_from) >= 2, 30, 0.05)
        assert client.watched_from[1] == lists[0][1] and int(lists[0][1]) > 1
        client.request("POST", path, body={"apiVersion": f"{group}/v1", "kind": "Probe", "metadata": {"name": "p1"}})
        wait_until("the watch to see the new Probe", lambda: ("ADDED", "p1") in changes, 30, 0.05)
        assert len(lists) == 1, "followed by the watch, not by relisting"
    finally:
        loop.stop()
        client.request("DELETE", f"{crds}/probes.{group}")
        if thread.ident:
            thread.join(10)


def _served(client: Client, path: str) -> bool:
    try:
        client.request("GET", path)
        return True
    except NotFoundError:
        time.sleep(0.1)
        return False
