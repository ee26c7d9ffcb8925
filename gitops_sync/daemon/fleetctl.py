"""`gitops-sync get | reconcile | suspend | resume`: the fleet's GitSync objects from the command line.

Like `flux get` / `flux reconcile`: these only read GitSync objects or patch them (an annotation, or
spec.suspend); the fleet controller (fleet/) sees the change through its watch and answers in the
object's status. Exit 0 on success, 1 when `reconcile --wait` timed out, 2 on bad input or API errors.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, NoReturn

import click

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.fleet import gitsync
from gitops_sync.errors import ClusterError, NotFoundError
from gitops_sync.options import DURATION, log_choices
from gitops_sync.resource import Manifest

_kubeconfig = click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="kubeconfig file.")
_context = click.option("--context", default=None, help="kubeconfig context.")
_namespace = click.option(
    "-n", "--namespace", default=None, help="The GitSync's namespace (default: the kubeconfig context's, else default)."
)


def _client(kubeconfig: str | None, context: str | None) -> Client:
    log_choices(click.get_current_context()).configure()  # warnings by default, on stderr: stdout is the answer
    try:
        return Client(kubeconfig.split(":")[0] if kubeconfig else None, context, pool_size=2, timeout=15)
    except ClusterError as exc:
        _fail(str(exc))


def _namespace_of(kubeconfig: str | None, context: str | None, namespace: str | None) -> str:
    """-n, else the kubeconfig context's namespace, else `default`: what kubectl would use."""
    from gitops_sync.cluster.kubeconfig import context_namespace

    return namespace or context_namespace(kubeconfig, context) or "default"


def request_stamp(now_ns: int | None = None) -> str:
    """An RFC 3339 time with nanoseconds (`2026-12-01T22:00:14.193720385Z`), as `flux reconcile` writes it."""
    ns = time.time_ns() if now_ns is None else now_ns
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d}Z"


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _age(stamp: str) -> str:
    try:
        seconds = time.time() - time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) + time.timezone
    except ValueError:
        return ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def row(obj: Manifest) -> dict[str, Any]:
    """What `get` shows of one GitSync (also its -o json)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conds.get("Ready") or {}
    stale = status.get("observedGeneration") != meta.get("generation")
    counts = status.get("counts") or {}
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "ready": "Unknown" if stale else ready.get("status", "Unknown"),
        "suspended": bool(spec.get("suspend")),
        "reason": "" if stale else str(ready.get("reason") or ""),
        "revision": str(status.get("lastAppliedRevision") or "")[:12],
        # Charts pulled from repositories for the state held: repository, chart, resolved version, digest.
        "charts": list(status.get("charts") or []),
        "drifted": int(counts.get("drifted") or 0),
        "conflicts": int(counts.get("conflict") or 0),
        "message": "waiting for the controller to observe this generation" if stale else ready.get("message", ""),
        "age": _age(str(meta.get("creationTimestamp") or "")),
        "cluster": target_of(spec, status),
        "lastError": str(status.get("lastError") or ""),
        # Each failed object of the last pass (the first 10): object, file, status, reason, message.
        "errors": list(status.get("errors") or []),
    }


def target_of(spec: dict[str, Any], status: dict[str, Any]) -> str:
    """The cluster a GitSync applies to: as its status names it (server#kube-system UID), else its kubeconfig
    Secret until the controller has reached it; "in-cluster" for the controller's own."""
    if status.get("cluster"):
        return str(status["cluster"])
    ref = (spec.get("kubeConfig") or {}).get("secretRef") or {}
    return f"secret/{ref.get('name')}" if ref.get("name") else "in-cluster"


@click.command("get")
@_kubeconfig
@_context
@_namespace
@click.option("-A", "--all-namespaces", is_flag=True, help="GitSyncs of every namespace.")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.argument("name", required=False)
def get(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    output: str,
    name: str | None,
) -> None:
    """List GitSync objects with their status (Ready, revision, drift, conflicts, message)."""
    namespace = _namespace_of(kubeconfig, context, namespace)
    with _client(kubeconfig, context) as client:
        try:
            if name:
                items = [client.request("GET", gitsync.object_path(namespace, name))]
            else:
                doc = client.request("GET", gitsync.collection_path(None if all_namespaces else namespace))
                items = doc.get("items") or []
        except NotFoundError:
            _fail(
                f"GitSync {namespace}/{name} not found"
                if name
                else "the GitSync CRD is not installed (kubectl apply -k deploy/kubernetes/crd/)"
            )
        except ClusterError as exc:
            _fail(str(exc))
    rows = [row(o) for o in items]
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no GitSync objects found", err=True)
        return
    cols = ["NAMESPACE", "NAME", "READY", "SUSPENDED", "REVISION", "DRIFT", "CONFLICTS", "CLUSTER", "AGE", "MESSAGE"]
    table = [
        [
            r["namespace"],
            r["name"],
            r["ready"],
            str(r["suspended"]).lower(),
            r["revision"],
            str(r["drifted"]),
            str(r["conflicts"]),
            r["cluster"],
            r["age"],
            r["message"],
        ]
        for r in rows
    ]
    widths = [max(len(c), *(len(t[i]) for t in table)) for i, c in enumerate(cols[:-1])]
    for line in [cols, *table]:
        click.echo("  ".join(v.ljust(w) for v, w in zip(line[:-1], widths, strict=True)) + "  " + line[-1])


def _patch(client: Client, namespace: str, name: str, body: dict[str, Any]) -> Manifest:
    try:
        result: Manifest = client.request(
            "PATCH", gitsync.object_path(namespace, name), body=body, content_type="application/merge-patch+json"
        )
        return result
    except NotFoundError:
        _fail(f"GitSync {namespace}/{name} not found")
    except ClusterError as exc:
        _fail(str(exc))


def _get(client: Client, namespace: str, name: str) -> Manifest:
    try:
        obj: Manifest = client.request("GET", gitsync.object_path(namespace, name))
        return obj
    except NotFoundError:
        _fail(f"GitSync {namespace}/{name} not found")
    except ClusterError as exc:
        _fail(str(exc))


_wait = click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait until the controller answers the request (status.lastHandledReconcileAt).",
)
_timeout = click.option("--timeout", default="2m", type=DURATION, show_default=True, help="How long --wait waits.")


def _request(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    name: str,
    *,
    wait: bool,
    timeout: float,
    spec: dict[str, Any] | None = None,
) -> None:
    """Annotate NAME with a fresh request stamp (patching `spec` in the same write), then with `wait` poll
    until the controller answers it: exit 0 Ready; 1 not Ready, blocked by a dependency (said as soon as
    the controller answers) or no answer in time; 2 on API errors."""
    namespace = _namespace_of(kubeconfig, context, namespace)
    stamp = request_stamp()
    body: dict[str, Any] = {"metadata": {"annotations": {gitsync.RECONCILE_ANNOTATION: stamp}}}
    if spec:
        body["spec"] = spec
    with _client(kubeconfig, context) as client:
        if not spec and (_get(client, namespace, name).get("spec") or {}).get("suspend"):
            click.echo(f"error: GitSync {namespace}/{name} is suspended: `gitops-sync resume {name}` first", err=True)
            sys.exit(1)
        _patch(client, namespace, name, body)
        what = "resumed" if spec else "reconcile requested for"
        click.echo(f"{what} GitSync {namespace}/{name} at {stamp}")
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            obj = _get(client, namespace, name)
            if (obj.get("status") or {}).get("lastHandledReconcileAt") == stamp:
                r = row(obj)
                if r["reason"] == "DependencyNotReady":
                    click.echo(f"not reconciled: {r['message']}")
                    sys.exit(1)
                click.echo(f"reconciled: Ready={r['ready']} revision={r['revision'] or '-'} {r['message']}")
                sys.exit(0 if r["ready"] == "True" else 1)
            time.sleep(0.5)
    click.echo(f"error: the controller did not answer within {timeout:g}s (is `gitops-sync run` running?)", err=True)
    sys.exit(1)


@click.command("reconcile")
@_kubeconfig
@_context
@_namespace
@_wait
@_timeout
@click.argument("name")
def reconcile(
    kubeconfig: str | None, context: str | None, namespace: str | None, wait: bool, timeout: float, name: str
) -> None:
    """Ask the controller to fetch and reconcile NAME now (annotation gitops-sync.io/reconcile-requested-at)."""
    _request(kubeconfig, context, namespace, name, wait=wait, timeout=timeout)


@click.command("suspend")
@_kubeconfig
@_context
@_namespace
@click.argument("name")
def suspend(kubeconfig: str | None, context: str | None, namespace: str | None, name: str) -> None:
    """Stop reconciling NAME (spec.suspend=true): no fetch, no apply, no drift correction until resumed.

    The controller keeps the last status (revision, counts, Ready) and adds the condition Suspended=True."""
    namespace = _namespace_of(kubeconfig, context, namespace)
    with _client(kubeconfig, context) as client:
        _patch(client, namespace, name, {"spec": {"suspend": True}})
    click.echo(f"GitSync {namespace}/{name} suspended")


@click.command("resume")
@_kubeconfig
@_context
@_namespace
@_wait
@_timeout
@click.argument("name")
def resume(
    kubeconfig: str | None, context: str | None, namespace: str | None, wait: bool, timeout: float, name: str
) -> None:
    """Reconcile NAME again (spec.suspend=false) and, unless --no-wait, wait for that pass (as `flux resume`)."""
    _request(kubeconfig, context, namespace, name, wait=wait, timeout=timeout, spec={"suspend": False})


__all__ = ["get", "reconcile", "request_stamp", "resume", "row", "suspend"]
