"""A tenant's GitSync on the real API server: it learns nothing of objects its ServiceAccount may not read.

The controller's watch cache reads with the controller's rights; a source that impersonates a
ServiceAccount must not see, diff or report the live values of what that ServiceAccount may not `get`.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, configmap, wait_until
from tests.integration.test_fleet import (
    admin_applied,
    cm_data,
    condition,
    crd,
    fleet_args,
    gs_status,
    tenant_and_admin,
)

__all__ = ["crd"]  # the module-scoped fixture, shared

MARKER = "tenant-must-not-see-7f3a91"
MARKER2 = "tenant-must-not-see-either-c41d2e"


def _entry(d: Daemon, source: str, kind: str, name: str) -> dict[str, Any] | None:
    for doc in d.status()["sources"]:
        if (doc.get("daemon") or {}).get("gitsync", {}).get("name") != source:
            continue
        for obj in doc["objects"]:
            if obj["kind"] == kind and obj["name"] == name:
                return dict(obj)
    return None


def _pages(d: Daemon) -> dict[str, str]:
    """The web page: the source list, every source page and every object page it links to."""
    seen: dict[str, str] = {}
    todo = ["/"]
    while todo and len(seen) < 60:
        path = todo.pop()
        if path in seen:
            continue
        code, body = d.get(path)
        assert code == 200, (path, code)
        html = body.decode()
        seen[path] = html
        for href in re.findall(r'href="(/sources/[^"?#]*)"', html):
            todo.append(href.replace("&amp;", "&"))
    return seen


def test_a_tenant_never_sees_live_values_it_may_not_read(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    other = f"{namespace}-r"[:63]
    kube.kubectl("create", "namespace", other)
    try:
        # The live object the tenant declares but may not read: a value only the cluster knows.
        kube.kubectl("apply", "-f", "-", input=configmap("guarded", {"k": MARKER}, namespace=other))
        tenant_and_admin(kube, namespace, other, tmp_path, "guarded", {"k": "from-git"}, interval="2s")
        log_path = tmp_path / "fleet.log"
        with Daemon(fleet_args(namespace, tmp_path, "--resync", "3"), kube.env, log_path) as d:
            admin_applied(kube, d, namespace, other)  # the controller's own source: unaffected
            ref = f"{namespace}/tenant"
            wait_until("the tenant's forbidden entry", lambda: _entry(d, ref, "ConfigMap", "guarded") or {}, 60)
            entry = _entry(d, ref, "ConfigMap", "guarded")
            assert entry is not None and entry["action"] == "error", entry
            user = f"system:serviceaccount:{namespace}:tenant"
            assert "is forbidden" in entry["message"] and f'User "{user}" cannot get' in entry["message"], entry
            assert not entry.get("drift") and not entry.get("conflicts") and not entry.get("foreign"), entry
            # Someone changes the guarded object while the tenant's source is loaded: a watch event, a
            # would-be fight, a new value; none of it reaches the tenant's reports.
            kube.kubectl(
                "patch",
                "configmap",
                "guarded",
                "-n",
                other,
                "--type=merge",
                "-p",
                json.dumps({"data": {"k": MARKER2, "x": MARKER}}),
            )
            time.sleep(4)  # a resync and a Git poll later
            mine = _entry(d, ref, "ConfigMap", "mine")
            assert mine is not None and mine["action"] != "error", mine  # what it may read converges
            assert cm_data(kube, namespace, "mine") == {"a": "1"}
            assert cm_data(kube, other, "guarded") == {"k": MARKER2, "x": MARKER}  # never written
            assert condition(kube, namespace, "admin", "Ready")["status"] == "True"
            status = gs_status(kube, namespace, "tenant")
            assert "forbidden" in status.get("lastError", "").lower(), status
            places = {
                "GitSync status": json.dumps(status),
                "/status": d.get("/status")[1].decode(),
                **{f"page {p}": html for p, html in _pages(d).items()},
            }
            assert any("guarded" in text for text in places.values())  # the object is there, its values not
        places["daemon log"] = log_path.read_text()
        events = [json.dumps(kube.list("events", ns)) for ns in (namespace, other)]
        places["Events"] = "\n".join(events)
        assert "guarded" in places["Events"]  # the refusal is reported, as an Event on the object
        for where, text in places.items():
            for marker in (MARKER, MARKER2):
                assert marker not in text, f"{marker} leaked into {where}"
    finally:
        kube.kubectl("delete", "namespace", other, "--wait=false", check=False)
