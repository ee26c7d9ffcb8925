"""What the generic fault tests sync and how they look at the result: many small objects, a `sync` run,
the live objects with their uids (a uid that survives proves the object was never deleted), the
ApplySet inventory. The tests in this directory turn these into assertions and RELIABILITY.md rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.daemon_support import REPO_ROOT, kubectl_edit_env

PART_OF = "applyset.kubernetes.io/part-of"
GROUP_KINDS = "applyset.kubernetes.io/contains-group-kinds"
KINDS = "configmaps,deployments,services,serviceaccounts"


def configmap(name: str, version: str, **labels: str) -> str:
    meta: dict[str, Any] = {"name": name, "labels": {"suite": "fault", **labels}}
    return (
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": meta,
                "data": {"version": version, "payload": f"{name}-{version}-" + "x" * 200},
            }
        )
        + "\n"
    )


def service(name: str, port: int = 80) -> str:
    return (
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name},
                "spec": {"selector": {"app": name}, "ports": [{"port": port, "targetPort": 8080}]},
            }
        )
        + "\n"
    )


def service_account(name: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}) + "\n"


def configmap_files(count: int, version: str, prefix: str = "cm", start: int = 0) -> dict[str, str | None]:
    """One file per ConfigMap (`cm/cm-007.json`), so a commit can drop one object by deleting its file."""
    return {
        f"{prefix}/{prefix}-{i:03d}.json": configmap(f"{prefix}-{i:03d}", version) for i in range(start, start + count)
    }


@dataclass
class SyncResult:
    code: int
    report: dict[str, Any]
    stderr: str
    seconds: float
    writes: int | None = None  # from the "requests" log line (None when the run never got that far)
    logs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summary(self) -> dict[str, int]:
        return dict(self.report.get("summary") or {})


def sync_command(repo: str, ns: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gitops_sync",
        "sync",
        "--repo",
        repo,
        "-n",
        ns,
        "--name",
        "fault-inv",
        "-o",
        "json",
        "--log-format",
        "json",
        "--log-level",
        "info",
        *args,
    ]


def finish(proc: subprocess.Popen[str], started: float, timeout: float = 300) -> SyncResult:
    """Wait for a `sync` started with `start_sync` and parse its report and logs."""
    out, err = proc.communicate(timeout=timeout)
    return _result(int(proc.returncode), out, err, time.monotonic() - started)


def start_sync(env: dict[str, str], repo: str, ns: str, *args: str, cache: Path | None = None) -> subprocess.Popen[str]:
    extra = ("--cache-dir", str(cache)) if cache else ()
    return subprocess.Popen(
        sync_command(repo, ns, *extra, *args),
        env=env,
        cwd=REPO_ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )


def run_sync(
    env: dict[str, str], repo: str, ns: str, *args: str, cache: Path | None = None, timeout: float = 300
) -> SyncResult:
    started = time.monotonic()
    return finish(start_sync(env, repo, ns, *args, cache=cache), started, timeout)


def _result(code: int, out: str, err: str, seconds: float) -> SyncResult:
    try:
        report = json.loads(out) if out.strip() else {}
    except ValueError:
        report = {"unparsed": out}
    logs = []
    for line in err.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            logs.append(doc)
    writes = next((int(d["writes"]) for d in logs if d.get("event") == "requests"), None)
    return SyncResult(code, report, err, seconds, writes, logs)


def kubectl(
    env: dict[str, str], *args: str, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, check=False, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args[:4])} failed ({r.returncode}): {r.stderr}")
    return r


def cm_version(env: dict[str, str], ns: str, name: str) -> str:
    """The ConfigMap's data.version ("" when it is missing or the API server does not answer)."""
    r = kubectl(env, "get", "configmap", name, "-n", ns, "-o", "jsonpath={.data.version}", check=False)
    return r.stdout if r.returncode == 0 else ""


def drift_configmap(env: dict[str, str], ns: str, name: str) -> None:
    """`kubectl edit` (scripted) of data.version v1 -> drifted: drift by another field manager."""
    r = kubectl(
        kubectl_edit_env(env, "s/version: v1$/version: drifted/"), "edit", f"configmap/{name}", "-n", ns, check=False
    )
    assert r.returncode == 0, r.stderr


@dataclass(frozen=True)
class LiveObject:
    kind: str
    name: str
    uid: str
    labels: dict[str, str]
    version: str  # ConfigMap data.version, "" for other kinds


def live_objects(env: dict[str, str], ns: str, kinds: str = KINDS) -> dict[tuple[str, str], LiveObject]:
    """Every object of `kinds` in the namespace, except what the cluster makes by itself."""
    items = json.loads(kubectl(env, "get", kinds, "-n", ns, "-o", "json").stdout)["items"]
    out = {}
    for item in items:
        meta = item["metadata"]
        name = meta["name"]
        if name in ("kube-root-ca.crt", "default") or item["kind"] == "ReplicaSet":
            continue
        out[(item["kind"], name)] = LiveObject(
            item["kind"],
            name,
            meta["uid"],
            dict(meta.get("labels") or {}),
            str((item.get("data") or {}).get("version", "")),
        )
    return out


def count_configmaps(env: dict[str, str], ns: str, version: str | None = None) -> int:
    """How many ConfigMaps of the suite (optionally at `version`) the namespace holds; -1 when unreachable."""
    r = kubectl(
        env, "get", "configmaps", "-n", ns, "-l", "suite=fault", "-o", "json", "--request-timeout=5s", check=False
    )
    if r.returncode != 0:
        return -1
    items = json.loads(r.stdout)["items"]
    return sum(1 for i in items if version is None or (i.get("data") or {}).get("version") == version)


def inventory(env: dict[str, str], ns: str, name: str = "fault-inv") -> tuple[str, set[str]]:
    """The ApplySet parent's id label and recorded group-kinds."""
    doc = json.loads(kubectl(env, "get", "configmap", name, "-n", ns, "-o", "json").stdout)
    meta = doc["metadata"]
    kinds = {k for k in str((meta.get("annotations") or {}).get(GROUP_KINDS, "")).split(",") if k}
    return str(meta["labels"]["applyset.kubernetes.io/id"]), kinds


def audit_deletes(audit_log: Path, ns: str, since_offset: int) -> list[str]:
    """`kind/name` of every delete in `ns` the API server audited after `since_offset` bytes."""
    out = []
    with audit_log.open("rb") as f:
        f.seek(since_offset)
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            ref = ev.get("objectRef") or {}
            if (
                ev.get("verb") == "delete"
                and ref.get("namespace") == ns
                and ev.get("stage") == "ResponseComplete"
                and "dryRun" not in str(ev.get("requestURI"))
            ):
                out.append(f"{ref.get('resource')}/{ref.get('name')}")
    return out


def audit_events(audit_log: Path, ns: str, since_offset: int, verbs: tuple[str, ...]) -> list[dict[str, Any]]:
    """The audit events (whole) of every completed, not dry-run request of `verbs` in `ns` after
    `since_offset` bytes, any resource."""
    out = []
    with audit_log.open("rb") as f:
        f.seek(since_offset)
        for line in f:
            if b'"ResponseComplete"' not in line or ns.encode() not in line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:  # the last line, still being written
                continue
            ref = ev.get("objectRef") or {}
            if ev.get("verb") in verbs and ref.get("namespace") == ns and "dryRun" not in str(ev.get("requestURI")):
                out.append(ev)
    return out


def audit_requests(
    audit_log: Path, ns: str, since_offset: int, verbs: tuple[str, ...], resource: str = "configmaps"
) -> list[str]:
    """`verb name` of every completed request of `verbs` on `resource` in `ns` after `since_offset` bytes."""
    return [
        f"{ev['verb']} {ev['objectRef'].get('name')}"
        for ev in audit_events(audit_log, ns, since_offset, verbs)
        if ev["objectRef"].get("resource") == resource and not ev["objectRef"].get("subresource")
    ]


def audit_writes(audit_log: Path, ns: str, since_offset: int, resource: str = "configmaps") -> int:
    """Completed writes (create/patch/update) of `resource` in `ns` after `since_offset` bytes."""
    return len(audit_requests(audit_log, ns, since_offset, ("create", "patch", "update"), resource))


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def no_traceback(*texts: str) -> bool:
    return not any("Traceback (most recent call last)" in t for t in texts)
