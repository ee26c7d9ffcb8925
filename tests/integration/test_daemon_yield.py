"""The daemon yields a field instead of fighting forever: to the real HPA controller, and to a manager that
keeps taking a field back; it resumes when Git's value changes or the other manager stops writing."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, deployment, wait_until
from tests.integration.test_daemon import events, replicas
from tests.integration.test_sync import gs

pytestmark = pytest.mark.cluster


def hpa(name: str, target: str, min_replicas: int, max_replicas: int) -> str:
    return (
        json.dumps(
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": name},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                    "minReplicas": min_replicas,
                    "maxReplicas": max_replicas,
                    "metrics": [
                        {
                            "type": "Resource",
                            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                        }
                    ],
                },
            }
        )
        + "\n"
    )


def start(kube: KubeCluster, tmp_path: Path, repo: Path, ns: str, *args: str) -> Daemon:
    d = Daemon(["--repo", str(repo), "-n", ns, *args], kube.env, tmp_path / "daemon.log")
    d.wait_ready()
    return d


def generation(kube: KubeCluster, ns: str, name: str) -> int:
    """Every change of the Deployment's spec (each scale, each correction) bumps it by one."""
    return int(kube.get("deployment", name, ns)["metadata"]["generation"])


def settled_generation(kube: KubeCluster, ns: str, name: str, quiet: float = 1.0) -> int:
    """The Deployment's generation once it has not moved for `quiet` seconds.

    The control plane bumps it once more ~0.2 s after the HPA's scale, with no field changing hands (the
    managedFields stay as they are): a kubectl read (~0.2 s) came after that; a read of a few ms can
    come before it, and the "no spec change" check below must start from the settled value."""
    seen = [(generation(kube, ns, name), time.monotonic())]

    def settled() -> bool:
        now = generation(kube, ns, name)
        if now != seen[-1][0]:
            seen.append((now, time.monotonic()))
        return time.monotonic() - seen[-1][1] >= quiet

    wait_until(f"the generation of {name} to settle", settled, 10.0, interval=0.05)
    return seen[-1][0]


def replica_history(d: Daemon, name: str) -> list[Any]:
    """The values of .spec.replicas the daemon's watch saw, in order (/status history)."""
    for obj in d.status()["history"]:
        if obj["kind"] == "Deployment" and obj["name"] == name:
            return [r["value"] for r in obj["fields"].get(".spec.replicas", [])]
    return []


def test_real_hpa_scaling_above_git_is_yielded_to_at_once_not_fought(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """Git says replicas 1, the HPA's minReplicas is 2: the HPA controller scales it (no metrics needed)."""
    repo = GitRepo(tmp_path / "repo", {"web.yaml": deployment("web", 1), "hpa.yaml": hpa("web", "web", 2, 4)})
    with start(kube, tmp_path, repo.path, namespace) as d:
        wait_until("the HPA to scale", lambda: replicas(kube, namespace, "web") == 2, 40.0, interval=0.2)
        wait_until("the yield", lambda: d.status()["yields"], 5.0)
        before = settled_generation(kube, namespace, "web")
        time.sleep(40.0)
        seen = replica_history(d, "web")
        print(f"replicas seen by the watch, 40 s after the HPA scaled: {seen}")
        assert seen == [1, 2], f"the HPA scaled once and nobody fought: {seen}\n{d.log_tail()}"
        assert generation(kube, namespace, "web") == before, "no spec change at all for 40 s"
        assert replicas(kube, namespace, "web") == 2

        yields = d.status()["yields"]
        assert len(yields) == 1, yields
        y = yields[0]
        assert (y["name"], y["path"], y["reason"]) == ("web", ".spec.replicas", "autoscaler")
        assert (y["manager"], y["operation"], y["subresource"]) == ("kube-controller-manager", "Update", "scale")
        assert y["autoscaler"] == {"namespace": namespace, "name": "web", "minReplicas": 2, "maxReplicas": 4}
        assert (y["desired"], y["live"]) == (1, 2)
        assert y["advice"] == "remove spec.replicas from Git or add an ignore rule"
        entry = d.entry("Deployment", "web")
        assert entry is not None and [f["path"] for f in entry["yielded"]] == [".spec.replicas"]
        assert entry["state"] != "drifted" and not entry["drift"], entry

        dep = kube.get("deployment", "web", namespace)
        owners = [
            m["manager"]
            for m in dep["metadata"]["managedFields"]
            if "f:replicas" in (m.get("fieldsV1") or {}).get("f:spec", {})
        ]
        assert owners == ["kube-controller-manager"], "our apply left replicas out: only the HPA owns it"
        logged = d.logged("yielding field")
        assert logged and logged[0]["autoscaler"]["name"] == "web", d.log_tail()
        wait_until("a FieldYielded Event", lambda: events(kube, namespace, "FieldYielded"), 3.0)
        message = events(kube, namespace, "FieldYielded")[0]["message"]
        assert f"HorizontalPodAutoscaler {namespace}/web (min 2, max 4)" in message, message
        assert "remove spec.replicas from Git or add an ignore rule" in message, message

        # Git changes its value (inside the HPA's range): the daemon corrects the field again
        repo.commit({"web.yaml": deployment("web", 3)}, "replicas 3")
        wait_until("replicas 3 from Git", lambda: replicas(kube, namespace, "web") == 3, 10.0)
        assert d.status()["yields"] == []
        assert d.logged("resuming field")[0]["why"] == "Git's value changed"
        assert d.stop() == 0


def test_git_wins_over_autoscaler_keeps_correcting_replicas(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    """The flag that makes Git win: the old behaviour, the fight goes on (the control for the test above)."""
    repo = GitRepo(tmp_path / "repo", {"web.yaml": deployment("web", 1), "hpa.yaml": hpa("web", "web", 2, 4)})
    with start(kube, tmp_path, repo.path, namespace, "--git-wins-over-autoscaler") as d:
        wait_until(
            "the HPA to scale and the daemon to correct it",
            lambda: replica_history(d, "web")[:3] == [1, 2, 1],
            60.0,
            interval=0.2,
        )
        print(f"replicas seen by the watch with Git winning: {replica_history(d, 'web')}")
        assert d.status()["yields"] == []
        assert d.stop() == 0


class Rogue(threading.Thread):
    """Another controller: scales the Deployment to `want` whenever it differs (manager kubectl, scale)."""

    def __init__(self, kube: KubeCluster, ns: str, name: str, want: int) -> None:
        super().__init__(daemon=True)
        self.kube, self.ns, self.name, self.want = kube, ns, name, want
        self.writes = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            if replicas(self.kube, self.ns, self.name) != self.want:
                self.kube.kubectl("scale", f"deployment/{self.name}", f"--replicas={self.want}", "-n", self.ns)
                self.writes += 1
            self.halt.wait(0.3)

    def stop(self) -> int:
        self.halt.set()
        self.join(10)
        return self.writes


def test_a_manager_that_keeps_taking_a_field_wins_after_three_takes_until_it_stops_or_git_changes(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo", {"web.yaml": deployment("web", 2)})
    with start(kube, tmp_path, repo.path, namespace, "--fight-window", "8s") as d:
        rogue = Rogue(kube, namespace, "web", 5)
        rogue.start()
        wait_until("the fight yielded", lambda: d.status()["yields"], 10.0, interval=0.1)
        time.sleep(3.0)  # the rogue keeps watching: nothing more to take
        assert rogue.stop() == 3, "three takes, then the daemon stopped correcting"
        assert replicas(kube, namespace, "web") == 5
        y = d.status()["yields"][0]
        assert (y["path"], y["reason"], y["manager"], y["subresource"]) == (
            ".spec.replicas",
            "fight",
            "kubectl",
            "scale",
        )
        assert (y["desired"], y["live"]) == (2, 5)
        assert [c["value"] for c in y["changes"]][-5:] == [5, 2, 5, 2, 5]
        assert "remove it from Git or add an ignore rule" in y["advice"]
        assert d.status()["fights"], "still reported as a fight"
        # the web page says so (it showed "desired (Git) 5, in sync" and the object synced before)
        inventory = d.status()["inventory"]["name"]
        code, body = d.get(f"/sources/{inventory}/objects/apps/Deployment/{namespace}/web")
        html = body.decode()
        row = re.search(r'<tr class="k-yielded">.*?<code>\.spec\.replicas</code>.*?</tr>', html, re.S)
        assert code == 200 and row is not None, html
        values = re.findall(r'<pre class="value">([^<]*)</pre>', row[0])
        assert values == ["2", "5"] and "kubectl scale" in row[0] and "--fight-window" in row[0], row[0]
        listing = d.get(f"/sources/{inventory}")[1].decode()
        assert re.search(r'<tr class="row st-row-yielded">\s*<td class="obj"[^>]*><a [^>]*>.*?"name">web<', listing)

        # the rogue stopped writing: once the window passes, Git's value is applied again
        took = wait_until("replicas back to 2 after the window", lambda: replicas(kube, namespace, "web") == 2, 15.0)
        print(f"resumed {took:.1f} s after the rogue stopped (window 8 s)")
        assert d.status()["yields"] == []
        assert "has not written it" in d.logged("resuming field")[-1]["why"]
        assert d.stop() == 0


def test_status_explains_a_scale_with_reason_source_and_the_time_the_watch_saw_it(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo", {"web.yaml": deployment("web", 2)})
    assert gs(kube, "sync", "--repo", str(repo.path), "-n", namespace).returncode == 0
    with start(kube, tmp_path, repo.path, namespace, "--detect-only") as d:
        wait_until("the first pass", lambda: d.entry("Deployment", "web"), 10.0)
        kube.kubectl("scale", "deployment/web", "--replicas=4", "-n", namespace)

        def scaled() -> dict[str, Any] | None:
            e = d.entry("Deployment", "web")
            found = [
                f for f in (e or {}).get("drift", []) + (e or {}).get("conflicts", []) if f["path"] == ".spec.replicas"
            ]
            return found[0] if found else None

        wait_until("the scale on /status", scaled, 5.0)
        f = scaled()
        assert f is not None and (f["reason"], f["manager"], f["subresource"]) == ("live-changed", "kubectl", "scale")
        assert f["source"].startswith("web.yaml:") and f["since"].endswith("Z"), f
        assert d.stop() == 0
