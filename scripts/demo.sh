#!/usr/bin/env bash
# The demo: a real cluster, the example repository synced into it, an out-of-band change, the report.
# Uses $KUBECONFIG when it is set; otherwise starts the local control plane (deploy/local-cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
GS=".venv/bin/gitops-sync"
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

if [ -z "${KUBECONFIG:-}" ]; then
  step "starting the local control plane (builds it the first time: ~7 min on 2 cores)"
  # Free loopback ports unless told otherwise (LOCAL_CLUSTER_AUTO_PORTS=0: the fixed ones of `make cluster-up`),
  # so a machine with something on 16443 still gets its demo. A cluster already running in the state dir is
  # reused on the ports it was started with.
  export LOCAL_CLUSTER_AUTO_PORTS="${LOCAL_CLUSTER_AUTO_PORTS:-1}"
  # Not `eval "$(… up)"`: eval of an empty output succeeds, and the demo went on against no cluster.
  if ! exports=$(python3 deploy/local-cluster/cluster.py up); then
    echo "error: the local control plane did not start (the line above says why); the demo stops here" >&2
    exit 1
  fi
  eval "$exports"
fi
for tool in kubectl helm; do
  if ! command -v "$tool" >/dev/null; then
    echo "error: the demo needs $tool on PATH (the local control plane's tools directory has it)" >&2
    exit 1
  fi
done

step "what Git declares: gitops-sync render --repo . --path examples-repo"
$GS render --repo . --path examples-repo | head -40
echo "   ..."

step "sync it: gitops-sync sync --repo . --path examples-repo --prune --wait"
$GS sync --repo . --path examples-repo --prune --wait --timeout 120

step "nothing changed, nothing written: the same sync again"
$GS sync --repo . --path examples-repo --prune -v | head -20

step "out of band: kubectl scale --replicas=10 and kubectl edit-style patch of the ConfigMap"
kubectl -n demo scale deployment/minha-api --replicas=10
kubectl -n demo patch configmap minha-api-config --type merge -p '{"data":{"LOG_LEVEL":"debug"}}' || true

step "the drift report: gitops-sync diff (exit code 1 = differences)"
set +e
$GS diff --repo . --path examples-repo
rc=$?
set -e
echo "exit code: $rc"
if [ "$rc" != 1 ]; then
  echo "error: diff should have found the drift (exit 1), it exited $rc; the demo stops here" >&2
  exit 1
fi

step "Git wins: gitops-sync sync --on-conflict force, then diff again"
$GS sync --repo . --path examples-repo --on-conflict force
$GS diff --repo . --path examples-repo && echo "exit code: 0 (in sync)"
