#!/usr/bin/env bash
# The demo: a real cluster, the example repository synced into it, an out-of-band change, the report.
# Uses $KUBECONFIG when it is set; otherwise starts the local control plane (deploy/local-cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
GS=".venv/bin/gitops-sync"
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

if [ -z "${KUBECONFIG:-}" ]; then
  step "starting the local control plane (builds it the first time: ~7 min on 2 cores)"
  eval "$(python3 deploy/local-cluster/cluster.py up)"
fi
KUBECTL=$(command -v kubectl || echo .local-cluster/bin/kubectl)

step "what Git declares: gitops-sync render --repo . --path examples-repo"
$GS render --repo . --path examples-repo | head -40
echo "   ..."

step "sync it: gitops-sync sync --repo . --path examples-repo --prune --wait"
$GS sync --repo . --path examples-repo --prune --wait --timeout 120

step "nothing changed, nothing written: the same sync again"
$GS sync --repo . --path examples-repo --prune -v | head -20

step "out of band: kubectl scale --replicas=10 and kubectl edit-style patch of the ConfigMap"
$KUBECTL -n demo scale deployment/minha-api --replicas=10
$KUBECTL -n demo patch configmap minha-api-config --type merge -p '{"data":{"LOG_LEVEL":"debug"}}' || true

step "the drift report: gitops-sync diff (exit code 1 = differences)"
set +e
$GS diff --repo . --path examples-repo
rc=$?
set -e
echo "exit code: $rc"

step "Git wins: gitops-sync sync --on-conflict force, then diff again"
$GS sync --repo . --path examples-repo --on-conflict force
$GS diff --repo . --path examples-repo && echo "exit code: 0 (in sync)"
