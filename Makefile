# gitops-sync developer tasks. Each block says who owns it; add new targets in a block of their own.

PYTHON ?= python3

# ---- local cluster (deploy/local-cluster, issue 2) ---------------------------------------------------
# `eval "$(make -s cluster-up)"` starts it and sets KUBECONFIG and PATH in the calling shell.
CLUSTER := $(PYTHON) deploy/local-cluster/cluster.py

.PHONY: cluster-build cluster-up cluster-down cluster-status
cluster-build:  ## build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, helm
	$(CLUSTER) build
cluster-up:     ## start the cluster in .local-cluster/ (builds first when needed); prints the export lines
	@$(CLUSTER) up
cluster-down:   ## stop every process of the cluster and remove .local-cluster/
	$(CLUSTER) down
cluster-status:
	@$(CLUSTER) status
# ---- end local cluster ----------------------------------------------------------------------------

# ---- test (placeholder: runs pytest with the cluster up; stops the cluster only if it started it) --
.PHONY: test
test:
	@started=; trap '[ -z "$$started" ] || $(CLUSTER) down' EXIT; \
	if ! $(CLUSTER) status >/dev/null 2>&1; then started=1; $(CLUSTER) up >/dev/null; fi && \
	eval "$$($(CLUSTER) env)" && .venv/bin/pytest
# ---- end test -------------------------------------------------------------------------------------
