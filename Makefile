# gitops-sync developer tasks. Each block says who owns it; add new targets in a block of their own.

PYTHON ?= python3

# ---- local cluster (deploy/local-cluster) ----------------------------------------------------------
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

# ---- python: venv, lint, test, demo (gitops-sync itself) -----------------------------------------
VENV := .venv
.PHONY: venv lint test unit demo reliability
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	$(VENV)/bin/python -m compileall -q gitops_sync  # as `pip install .` does; see bench/run.py
	touch $@
venv: $(VENV)/.installed  ## the project's virtual env with gitops-sync and its dev tools

# Every Python file of the repository: the package, its tests, the benchmarks and the cluster launcher.
PY_SOURCES := gitops_sync tests bench deploy/local-cluster/cluster.py
lint: venv      ## ruff (lint and format check) and mypy (strict) over every Python source (mypy's files: pyproject.toml)
	$(VENV)/bin/ruff check $(PY_SOURCES)
	$(VENV)/bin/ruff format --check $(PY_SOURCES)
	$(VENV)/bin/mypy

unit: venv      ## the fast tests only (no cluster)
	$(VENV)/bin/pytest tests/unit -q

# The README's test command. pytest's `kube` fixture reuses the cluster $KUBECONFIG points at, or starts
# one for the session and stops it afterwards.
test: venv cluster-build lint  ## lint + every test, against a real local control plane
	$(VENV)/bin/pytest -q

reliability: venv cluster-build  ## the fault and fuzz suite only; rewrites RELIABILITY.md when every case ran
	$(VENV)/bin/pytest -q tests/reliability

demo: venv      ## start the local cluster (unless KUBECONFIG is set), sync examples-repo, drift it, report
	bash scripts/demo.sh
# ---- end python -----------------------------------------------------------------------------------

# ---- bench: gitops-sync vs kubectl on the local control plane (bench/) -------------------------------
# `make bench` runs the full suite (N = 100, 1,000, 5,000, medians of 3; case 6 at 20,000; ~45 min) against a cluster of its
# own and rewrites BENCHMARKS.md; `make bench-quick` is the CI-sized run (N = 100, one repeat, no file).
# BENCH_ARGS passes options through, e.g. `make bench BENCH_ARGS="--sizes 1000 --repeats 1"`.
BENCH_ARGS ?=
.PHONY: bench bench-quick bench-fleet
bench: venv     ## benchmarks vs kubectl; writes BENCHMARKS.md
	$(VENV)/bin/python bench/run.py $(BENCH_ARGS)
bench-quick: venv  ## the quick benchmark run (CI): prints the table only
	$(VENV)/bin/python bench/run.py --quick $(BENCH_ARGS)
# The fleet vs Flux's own controllers (built on demand: `cluster.py build --with flux`, ~15-30 min cold), on a
# cluster of its own: (100, 10) by default, e.g. BENCH_FLEET_ARGS="--sizes 100x10,1000x4"; rewrites that size's
# section of BENCHMARKS-fleet.md.
bench-fleet: venv  ## gitops-sync's fleet vs Flux (source- + kustomize-controller); writes BENCHMARKS-fleet.md
	$(VENV)/bin/python -m bench.fleet_flux $(BENCH_FLEET_ARGS)
# ---- end bench ------------------------------------------------------------------------------------
