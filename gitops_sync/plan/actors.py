"""Who a field manager is, in words a person recognises (Argo CD users ask to tell an HPA from `kubectl scale`).

The API server records only (manager, operation, subresource); the mapping below is how the common
tools identify themselves. Unknown managers are shown as they are.
"""

from __future__ import annotations

_KUBECTL_VERBS = {
    "kubectl-edit": "kubectl edit",
    "kubectl-patch": "kubectl patch",
    "kubectl-label": "kubectl label",
    "kubectl-annotate": "kubectl annotate",
    "kubectl-set": "kubectl set",
    "kubectl-rollout": "kubectl rollout",
    "kubectl-create": "kubectl create",
    "kubectl-replace": "kubectl replace",
    "kubectl-client-side-apply": "kubectl apply (client-side)",
}


def describe(manager: str, operation: str = "", subresource: str = "", *, ours: str = "") -> str:
    """`kubectl` + Update + `scale` -> "kubectl scale"; the controller-manager on `scale` -> the HPA."""
    if not manager:
        return ""
    if ours and manager == ours:
        return "Git (this tool)"
    if manager == "kubectl":
        if subresource == "scale":
            return "kubectl scale"
        return "kubectl apply --server-side" if operation == "Apply" else "kubectl"
    if manager in _KUBECTL_VERBS:
        return _KUBECTL_VERBS[manager]
    if manager == "kube-controller-manager" and subresource == "scale":
        return "HorizontalPodAutoscaler (kube-controller-manager)"
    if manager == "helm":
        return "Helm (server-side apply)" if operation == "Apply" else "Helm"
    return manager


def record(manager: str, operation: str = "", subresource: str = "") -> str:
    """`kubectl (Update, subresource scale)`: the managedFields entry as written, before it is put in words."""
    if not manager:
        return "(nobody)"
    extra = ", ".join(x for x in (operation, f"subresource {subresource}" if subresource else "") if x)
    return f"{manager} ({extra})" if extra else manager
