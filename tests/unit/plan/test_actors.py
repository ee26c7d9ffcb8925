import pytest

from gitops_sync.plan.actors import describe


@pytest.mark.parametrize(
    ("manager", "operation", "subresource", "expected"),
    [
        ("kubectl", "Update", "scale", "kubectl scale"),
        ("kube-controller-manager", "Update", "scale", "HorizontalPodAutoscaler (kube-controller-manager)"),
        ("kube-controller-manager", "Update", "status", "kube-controller-manager"),
        ("kubectl-edit", "Update", "", "kubectl edit"),
        ("kubectl", "Apply", "", "kubectl apply --server-side"),
        ("kubectl-client-side-apply", "Update", "", "kubectl apply (client-side)"),
        ("helm", "Update", "", "Helm"),
        ("helm", "Apply", "", "Helm (server-side apply)"),
        ("gitops-sync", "Apply", "", "Git (this tool)"),
        ("argocd-controller", "Apply", "", "argocd-controller"),
        ("", "", "", ""),
    ],
)
def test_describe(manager: str, operation: str, subresource: str, expected: str) -> None:
    assert describe(manager, operation, subresource, ours="gitops-sync") == expected
