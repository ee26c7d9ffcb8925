"""`render`: the desired objects as multi-document YAML, no cluster needed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from gitops_sync.cli.attempt import load_source, start_attempt
from gitops_sync.cli.group import ENV_EPILOG
from gitops_sync.cli.output import stdout_reader_may_leave
from gitops_sync.options import LogChoices, log_options, source_options

if TYPE_CHECKING:
    from gitops_sync.engine import SourceOptions
    from gitops_sync.resource import Manifest


@click.command(epilog=ENV_EPILOG)
@log_options
@source_options
@click.option("--show-secrets", is_flag=True, help="Print Secret values (masked as *** by default).")
def render(logs: LogChoices, source: SourceOptions, namespace: str, show_secrets: bool) -> None:
    """Print the desired objects as multi-document YAML (no cluster needed)."""
    from gitops_sync.plan.masking import mask_secret
    from gitops_sync.render import to_yaml
    from gitops_sync.resource import DesiredObject, ObjectKey

    attempt = start_attempt("render", logs=logs, source=source)
    attempt.logs.configure()
    checkout, objects = load_source(attempt, source)
    # Helm hooks are run by a pass, not applied as objects; render prints them too, last (what helm template gives)
    objects = [*objects, *(h for h in checkout.hooks if isinstance(h, DesiredObject))]
    manifests = [o.manifest if show_secrets else mask_secret(o.manifest) for o in objects]
    cluster_scoped = _cluster_scoped_kinds(manifests)
    with stdout_reader_may_leave(0):
        click.echo(f"# revision: {checkout.revision or '(plain directory)'}")
        click.echo(f"# namespace: {namespace} (-n: for namespaced objects that name none)")
        # charts from repositories (helm-chart.yaml): the version each range resolved to and the archive's digest
        for c in sorted({tuple(o.extra["chart"].values()) for o in objects if "chart" in o.extra}):
            click.echo(f"# chart: {c[1]} {c[2]} from {c[0]} ({c[3]})")
        for manifest in manifests:
            document = to_yaml([manifest])
            key = ObjectKey.of(manifest)
            if not key.namespace and (key.group, key.kind) not in cluster_scoped:
                head, sep, rest = document.partition("\n")
                document = f"{head}{sep}# namespace: {namespace} (from -n)\n{rest}"
            click.echo(document, nl=False)


# Built-in cluster-scoped kinds: `render` runs without a cluster, so it cannot ask discovery. A custom
# cluster-scoped kind is recognised when its CRD is in the same source.
_BUILTIN_CLUSTER_SCOPED = frozenset(
    {
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("", "ComponentStatus"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "CSINode"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("networking.k8s.io", "IngressClass"),
        ("node.k8s.io", "RuntimeClass"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
    }
)


def _cluster_scoped_kinds(manifests: list[Manifest]) -> set[tuple[str, str]]:
    """(group, kind) of the built-in cluster-scoped kinds and of CRDs in the source with `scope: Cluster`."""
    out = set(_BUILTIN_CLUSTER_SCOPED)
    for m in manifests:
        spec = m.get("spec") if m.get("kind") == "CustomResourceDefinition" else None
        if isinstance(spec, dict) and spec.get("scope") == "Cluster":
            names = spec.get("names") or {}
            out.add((str(spec.get("group", "")), str(names.get("kind", "") if isinstance(names, dict) else "")))
    return out
