#!/usr/bin/env bash
# `make test` (the README's test command, and CI's through .ci/run): every check, in steps that use both cores.
#
#   1. lint, the unit tests (pytest-xdist, -n auto) and the start of ONE local cluster, all at once
#      (a reachable $KUBECONFIG is reused instead: nothing is started);
#   2. the integration tests on that cluster, in parallel (-n 2 --dist loadgroup: tests that share
#      something cluster-wide carry an `xdist_group` mark and run one after another on one worker);
#   3. the reliability suite, in parallel too (-n 3 --dist loadgroup --no-loadscope-reorder): its tests mostly
#      wait (faults, timeouts, stopped API servers), so three workers on two cores pay (113 tests: 1,537 s
#      serially, 805 s on three workers, back to back at a load of ~16 on a shared machine). A module with a
#      private cluster runs on one worker; tests whose figures are timings (`alone` mark) run with no other
#      test beside them; RELIABILITY.md is rewritten when every one of its tests passed (tests/reliability/);
#   4. the quick benchmark (tests marked `bench`), alone, so its figures are not taken under the other tests.
#
# The steps run one after another: steps 2 and 3 at once would put five workers on two cores, and the timing
# bounds of each (the `alone` tests, the browser's) beside the other's tests.
# Time budget (issue 23): the whole .ci/run under 20 minutes on a 2-core machine; each step prints its time.
# Every step runs even when one before it failed (one CI run reports everything); the exit status is 1 when
# any step failed. pytest's exit status 5 (no tests collected) is not a failure. Each step ends with one
# `==> step: ...` line and a summary table closes the run. TEST_WORKERS sets the integration workers (2),
# RELIABILITY_WORKERS the reliability ones (3).
# Every test lives in tests/unit, tests/integration or tests/reliability: step 0 fails on a test elsewhere.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin
PYTHON=${PYTHON:-python3}
LAUNCHER=deploy/local-cluster/cluster.py
WORKERS=${TEST_WORKERS:-2}
RELIABILITY_WORKERS=${RELIABILITY_WORKERS:-3}
LOGS=.cache/test-logs  # each step's full output, kept after the run
rm -rf "$LOGS" && mkdir -p "$LOGS"

summary=()  # one line per step for the closing table
failed=0
t_start=$SECONDS

# record STEP RC SECONDS DETAIL: one `==> step` line now, one row of the closing table
record() {
  local step=$1 rc=$2 secs=$3 detail=$4 verdict
  case $rc in
    0) verdict=ok ;;
    5) verdict=ok; detail="no tests collected" ;;
    *) verdict=FAILED; failed=1 ;;
  esac
  printf '\n==> %s: %s in %d s%s\n' "$step" "$verdict" "$secs" "${detail:+ ($detail)}"
  summary+=("$(printf '%-12s %-7s %5d s   %s' "$step" "$verdict" "$secs" "$detail")")
}

# pytest's closing line ("3 failed, 1480 passed in 45.88s"), from a step's log
outcome() { grep -E ' in [0-9.]+s' "$1" | tail -n 1 | sed -E 's/^=+ //; s/ =+$//; s/ \([0-9:]+\)$//'; }

# run_pytest STEP ARGS...: pytest in the foreground, its output shown and kept in $LOGS/STEP.log
run_pytest() {
  local step=$1 t0=$SECONDS rc
  shift
  printf '\n==> %s: pytest %s\n' "$step" "$*"
  "$PY/pytest" "$@" 2>&1 | tee "$LOGS/$step.log"
  rc=${PIPESTATUS[0]}
  record "$step" "$rc" $((SECONDS - t0)) "$(outcome "$LOGS/$step.log")"
}

# --- the cluster: $KUBECONFIG's when it answers, else one started now in the background ----------------
state="" cluster_pid="" lint_pid=""
cleanup() {
  [ -n "$lint_pid" ] && kill "$lint_pid" 2>/dev/null
  [ -n "$cluster_pid" ] && kill "$cluster_pid" 2>/dev/null
  if [ -n "$state" ] && [ -e "$state" ]; then
    "$PYTHON" "$LAUNCHER" --dir "$state" down >/dev/null 2>&1
    rm -rf "$state"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

reachable() {
  local kubectl="$(dirname "$KUBECONFIG")/bin/kubectl"
  [ -x "$kubectl" ] || kubectl="$("$PYTHON" "$LAUNCHER" build 2>/dev/null | tail -n 1)/kubectl"
  [ "$("$kubectl" --kubeconfig="$KUBECONFIG" get --raw=/readyz --request-timeout=5s 2>/dev/null)" = ok ]
}

t_cluster_epoch=$(date +%s)
if [ -n "${KUBECONFIG:-}" ] && [ -f "$KUBECONFIG" ] && reachable; then
  record cluster 0 0 "reusing the one KUBECONFIG points at: $KUBECONFIG"
else
  unset KUBECONFIG
  # Under the launcher's cache, where .ci/run stops every cluster left behind.
  mkdir -p .cache/local-cluster/sessions
  state=.cache/local-cluster/sessions/make-test-$$
  printf '==> cluster: starting one in the background (%s; log %s/cluster.log)\n' "$state" "$LOGS"
  "$PYTHON" "$LAUNCHER" --dir "$state" up --auto-ports >"$LOGS/cluster.env" 2>"$LOGS/cluster.log" &
  cluster_pid=$!
fi

# --- 0. every test is in one of the steps' directories ------------------------------------------------
t0=$SECONDS
"$PY/pytest" --collect-only -q -p no:cacheprovider tests \
  --ignore=tests/unit --ignore=tests/integration --ignore=tests/reliability >"$LOGS/layout.log" 2>&1
rc=$?
if [ "$rc" = 5 ]; then
  record layout 0 $((SECONDS - t0)) "every test is in tests/unit, tests/integration or tests/reliability"
else
  cat "$LOGS/layout.log"
  record layout 1 $((SECONDS - t0)) "tests outside tests/unit, tests/integration, tests/reliability: no step runs them"
fi

# --- 1. lint (background, output shown when done) and the unit tests ----------------------------------
t_lint=$SECONDS
(make -s lint >"$LOGS/lint.log" 2>&1; echo $? >"$LOGS/lint.rc"; echo $((SECONDS)) >"$LOGS/lint.end") &
lint_pid=$!

run_pytest unit tests/unit -q -n auto

wait "$lint_pid"
lint_pid=""
printf '\n==> lint: make lint\n'
cat "$LOGS/lint.log"
record lint "$(cat "$LOGS/lint.rc")" $(($(cat "$LOGS/lint.end") - t_lint)) "ruff check, ruff format --check, mypy"

if [ -n "$cluster_pid" ]; then
  wait "$cluster_pid"
  rc=$?
  cluster_pid=""
  if [ "$rc" = 0 ]; then
    eval "$(grep '^export ' "$LOGS/cluster.env")"
    # its export lines are written once it is ready: the file's time is when it was
    record cluster 0 $(($(stat -c %Y "$LOGS/cluster.env") - t_cluster_epoch)) "started in the background, reused by every step"
  else
    cat "$LOGS/cluster.log"
    record cluster "$rc" $(($(date +%s) - t_cluster_epoch)) "cluster.py up failed: the cluster steps are not run"
  fi
fi

if [ -n "${KUBECONFIG:-}" ]; then
  # --- 2. integration tests, in parallel on the one cluster ---------------------------------------------
  run_pytest integration tests/integration -q -m "not bench" -n "$WORKERS" --dist loadgroup --durations=15
  # --- 3. the reliability suite, in parallel (its private clusters, `alone` tests: tests/reliability/) ---
  run_pytest reliability tests/reliability -q -n "$RELIABILITY_WORKERS" --dist loadgroup --no-loadscope-reorder \
    --durations=25
  # --- 4. the quick benchmark, alone --------------------------------------------------------------------
  run_pytest bench tests/integration -q -m bench
else
  failed=1
fi

printf '\n==> make test: %s in %d s\n' "$([ "$failed" = 0 ] && echo passed || echo FAILED)" $((SECONDS - t_start))
printf '    %s\n' "${summary[@]}"
exit "$failed"
