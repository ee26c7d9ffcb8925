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
# Every package (pip and the build backend included) comes from the hashed lock requirements/dev.lock; only
# gitops-sync itself is installed unhashed (editable, built with the locked setuptools).
$(VENV)/.installed: pyproject.toml requirements/dev.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --require-hashes --no-deps -r requirements/dev.lock
	$(VENV)/bin/pip install -q --no-deps --no-build-isolation -e .
	$(VENV)/bin/python -m compileall -q gitops_sync  # as `pip install .` does; see bench/run.py
	touch $@
venv: $(VENV)/.installed  ## the project's virtual env with gitops-sync and its dev tools

# Every Python file of the repository: the package, its tests, the benchmarks and the cluster launcher.
PY_SOURCES := gitops_sync tests bench deploy/local-cluster/cluster.py setup.py
lint: venv      ## ruff (lint and format check) and mypy (strict) over every Python source (mypy's files: pyproject.toml)
	$(VENV)/bin/ruff check $(PY_SOURCES)
	$(VENV)/bin/ruff format --check $(PY_SOURCES)
	$(VENV)/bin/mypy

unit: venv      ## the fast tests only (no cluster)
	$(VENV)/bin/pytest tests/unit -q

# The README's test command (scripts/test.sh says how): lint, unit tests (xdist) and the start of one local
# cluster at once ($KUBECONFIG's is reused when it answers); then the integration tests in parallel on it, the
# reliability suite in parallel too and the quick benchmark alone; one summary line per step.
test: venv cluster-build  ## lint + every test, against a real local control plane
	bash scripts/test.sh

RELIABILITY_WORKERS ?= 3
reliability: venv cluster-build  ## the fault and fuzz suite only (pytest-xdist); rewrites RELIABILITY.md when every case passed
	$(VENV)/bin/pytest -q tests/reliability -n $(RELIABILITY_WORKERS) --dist loadgroup --no-loadscope-reorder

demo: venv      ## start the local cluster (unless KUBECONFIG is set), sync examples-repo, drift it, report
	bash scripts/demo.sh
# ---- end python -----------------------------------------------------------------------------------

# ---- package: locks, dist, image (deploy/) --------------------------------------------------------------
# requirements/*.lock: hashed pins compiled by uv from pyproject.toml (+ requirements/build.in), one
# resolution for every platform (--universal) at Python 3.11. dev.lock (make venv) is compiled first;
# runtime.lock (the image) and build.lock (the image's wheel build) are held to its versions (-c).
# `make lock` keeps today's pins where they still satisfy pyproject; `make lock-upgrade` takes the newest.
UV_COMPILE = $(VENV)/bin/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes \
	--custom-compile-command "make lock"
LOCK_UPGRADE ?=
.PHONY: lock lock-upgrade dist image image-context
lock: venv      ## refresh requirements/*.lock from pyproject.toml (then `make venv` installs them)
	$(UV_COMPILE) $(LOCK_UPGRADE) pyproject.toml --extra dev requirements/build.in -o requirements/dev.lock
	$(UV_COMPILE) pyproject.toml -c requirements/dev.lock -o requirements/runtime.lock
	$(UV_COMPILE) requirements/build.in -c requirements/dev.lock -o requirements/build.lock
lock-upgrade:   ## as `lock`, taking the newest versions pyproject.toml allows
	$(MAKE) lock LOCK_UPGRADE=--upgrade

# The sdist and the wheel built from it (so the sdist is proven complete), with the locked setuptools; the
# commit is baked into both (setup.py).
dist: venv      ## dist/gitops_sync-<version>.tar.gz and dist/gitops_sync-<version>-py3-none-any.whl
	rm -rf dist
	$(VENV)/bin/python -m build --no-isolation --outdir dist .
	@ls -l dist

# The daemon image without a Docker daemon (buildah on an mmdebstrap Debian base; kubectl/helm from the
# local control plane's Go build): prints its ID and digest, SBOM in .cache/image/sbom. Needs root and
# buildah, podman, mmdebstrap (.ci/run installs them). IMAGE=… names it (default localhost/gitops-sync:<version>).
image: venv cluster-build  ## build the image (deploy/Containerfile, deploy/image/build.sh)
	bash deploy/image/build.sh all
# The same build context for `docker build -f deploy/Containerfile .cache/image/context` elsewhere.
image-context: venv cluster-build
	bash deploy/image/build.sh context
# ---- end package ----------------------------------------------------------------------------------

# ---- bench: gitops-sync vs kubectl on the local control plane (bench/) -------------------------------
# `make bench` runs the full suite (N = 100, 1,000, 5,000, medians of 3; case 6 at 20,000; ~45 min) against a cluster of its
# own and rewrites BENCHMARKS.md; `make bench-quick` is the CI-sized run (N = 100, one repeat, no file).
# BENCH_ARGS passes options through, e.g. `make bench BENCH_ARGS="--sizes 1000 --repeats 1"`.
BENCH_ARGS ?=
.PHONY: bench bench-quick bench-fleet bench-clusters
bench: venv     ## benchmarks vs kubectl; writes BENCHMARKS.md
	$(VENV)/bin/python bench/run.py $(BENCH_ARGS)
bench-quick: venv  ## the quick benchmark run (CI): prints the table only
	$(VENV)/bin/python bench/run.py --quick $(BENCH_ARGS)
# The fleet vs Flux's own controllers (built on demand: `cluster.py build --with flux`, ~15-30 min cold), on a
# cluster of its own: (100, 10) by default, e.g. BENCH_FLEET_ARGS="--sizes 100x10,1000x4"; rewrites that size's
# section of BENCHMARKS-fleet.md.
bench-fleet: venv  ## gitops-sync's fleet vs Flux (source- + kustomize-controller); writes BENCHMARKS-fleet.md
	$(VENV)/bin/python -m bench.fleet_flux $(BENCH_FLEET_ARGS)
# One controller, 2 clusters x N GitSyncs vs 1 cluster x 2N (issue 26), two private clusters; prints the table.
# Default N = 100 x 20 ConfigMaps; smaller: BENCH_CLUSTERS_ARGS="--per-cluster 20".
bench-clusters: venv  ## the fleet on 2 clusters x N GitSyncs vs 1 x 2N: all Ready time and peak RSS
	$(VENV)/bin/python -m bench.fleet_clusters $(BENCH_CLUSTERS_ARGS)
# ---- end bench ------------------------------------------------------------------------------------
