#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what is missing (venv, Kafka jars, SeaweedFS,
# llama.cpp, the model), starts the local stack and the 3-broker Kafka cluster beside it, runs lint,
# type checks, then pytest in tiers (docs/testing.md): the pure tier first, stopping at its first
# failure, then every other test on parallel workers. Both services are always stopped again (set
# KAFKAGEN_KEEP_STACK=1 to leave them running).
#
#   bash scripts/test.sh                   everything (what .ci/run runs)
#   bash scripts/test.sh --fast            the pure tier only: no service, no llama.cpp build
#   bash scripts/test.sh tests/consumers   extra arguments go to pytest, in both tiers
#
# KAFKAGEN_TEST_WORKERS sets the pytest-xdist workers of the second tier (default 4: its tests
# mostly wait on Kafka, S3 and child processes, so 2 cores carry more than 2 workers).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
FAST=0
if [ "${1:-}" = "--fast" ]; then
  FAST=1
  shift
fi
VENV="${KAFKAGEN_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
WORKERS="${KAFKAGEN_TEST_WORKERS:-4}"
export AWS_EC2_METADATA_DISABLED=true

log() { printf '[test %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# pytest's exit 5 is "no test collected" (a selection that matched none in this tier): not a failure
# of the tier, but the whole run must have run some test.
RAN=0
tier() {
  local name="$1"
  shift
  log "pytest: $name"
  local rc=0
  # NICE=n before the call runs the tier at that niceness (its child processes inherit it)
  nice -n "${NICE:-0}" "$PY" -m pytest -p no:cacheprovider "$@" || rc=$?
  if [ "$rc" = 5 ]; then
    log "pytest: no test of the $name tier selected"
    return 0
  fi
  [ "$rc" = 0 ] && RAN=1
  return "$rc"
}

if [ "$FAST" = 1 ]; then
  KAFKAGEN_WITH_LLM=0 KAFKAGEN_WITH_BROWSER=0 bash scripts/setup-env.sh
  tier "pure (--fast)" -q -m pure -n 2 "$@"
  [ "$RAN" = 1 ] || { log "no test ran"; exit 1; }
  log "done"
  exit 0
fi

# With Chromium (Debian's package) for the dashboard's browser test (tests/launch/test_dashboard.py).
# On a fresh machine llama.cpp builds (~15 min on 2 cores) in the background, at low priority, while
# every test that does not need it runs; only the llama.cpp tests (marker `llm`) wait for it.
KAFKAGEN_LLM_IN_BACKGROUND=1 KAFKAGEN_WITH_BROWSER="${KAFKAGEN_WITH_BROWSER:-1}" bash scripts/setup-env.sh

STACK_PID=""
service_clues() {
  # After a failed run: what the services' own logs and the kernel say about a service that died
  # (CI keeps only the end of the output, so only the telling lines).
  local f
  for f in .local/logs/*.log .local/cluster3/logs/*.log; do
    [ -f "$f" ] || continue
    grep -hE "ERROR|FATAL|Exiting|shutting down|Shutting down|OutOfMemory" "$f" | tail -n 5 | sed "s|^|$f: |" >&2 || true
  done
  dmesg 2>/dev/null | grep -iE "out of memory|oom-kill|killed process" | tail -n 5 >&2 || true
}
stop_stack() {
  local rc=$?
  [ "$rc" = 0 ] || service_clues
  # a stack still starting in the background is let finish first, so that nothing outlives the run
  [ -n "$STACK_PID" ] && { wait "$STACK_PID" 2>/dev/null || true; }
  [ "${KAFKAGEN_KEEP_STACK:-0}" = 1 ] && return
  "$PY" -m launch.stack --cluster3 down || true
  "$PY" -m launch.stack down || true
}
trap stop_stack EXIT

# The stack starts in the background (JVMs booting, llama.cpp loading its model) while lint, type
# checks and the pure tier run: none of them needs it.
STACK_LOG="$(mktemp -t kafkagen-stack.XXXXXX.log)"
log "starting the local stack and the 3-broker test cluster (log: $STACK_LOG)"
(
  "$PY" -m launch.stack up kafka s3
  # The 3-broker cluster beside it (home .local/cluster3, brokers on the Kafka port + 2, + 4, + 6):
  # the tests where replication matters run on it; they form one xdist group (tests/conftest.py).
  "$PY" -m launch.stack --cluster3 up
) > "$STACK_LOG" 2>&1 &
STACK_PID=$!

log "lint and type checks"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy" .  # every package (pyproject.toml excludes .venv and .local)

tier "pure" -q -x -m pure -n 2 --dist loadgroup --basetemp=/tmp/kafkagen-t1 "$@"

if ! wait "$STACK_PID"; then
  cat "$STACK_LOG" >&2
  log "the local stack did not start (log above)"
  exit 1
fi
cat "$STACK_LOG" >&2

# --basetemp: short paths (supervisord's AF_UNIX socket lives under a test's tmp_path)
tier "services, processes, e2e" -q -m "not pure and not alone and not llm" -n "$WORKERS" \
  --dist loadgroup --basetemp=/tmp/kafkagen-t2 --durations=15 "$@"

# The fault audit's two runs (verdicts that include their own timing; tests/e2e/test_chaos.py) run
# beside each other, on ports of their own, with no test of the parallel tier beside them. An audit
# mostly waits on its fault schedule, so meanwhile the llama.cpp build finishes if it has not yet
# and the llama.cpp tier runs, both at nice 10: they take only the cores the audits leave idle.
AUDIT_LOG="$(mktemp -t kafkagen-audit.XXXXXX.log)"
(
  # no later tier uses the 3-broker test cluster: stopped beside the audit (its brokers' controlled
  # shutdown takes ~40 s), so their JVMs leave the cores to it
  "$PY" -m launch.stack --cluster3 down > /dev/null 2>&1 &
  rc=0
  tier "fault audit" -q -m "alone and e2e and not pure" -n 2 --dist loadgroup \
    --basetemp=/tmp/kafkagen-t4 --durations=5 "$@" || rc=$?
  wait
  exit "$rc"
) > "$AUDIT_LOG" 2>&1 &
AUDIT_PID=$!
log "fault audit: started in the background (log: $AUDIT_LOG, printed when it ends)"

llm_rc=0
{
  log "llama.cpp: waiting for its build, then starting the llama-servers"
  nice -n 10 bash scripts/setup-env.sh &&
    nice -n 10 "$PY" -m launch.stack up llm >&2 &&
    NICE=10 tier "llama.cpp" -q -m "llm and not pure and not alone" -n 2 --dist loadgroup \
      --basetemp=/tmp/kafkagen-t3 --durations=5 "$@"
} || llm_rc=$?
audit_rc=0
wait "$AUDIT_PID" || audit_rc=$?
cat "$AUDIT_LOG" >&2
[ "$audit_rc" = 0 ] && [ "$llm_rc" = 0 ] || exit 1

# Tests that start and stop whole stacks on fixed ports, one at a time, with nothing beside them.
tier "alone" -q -m "alone and not e2e and not pure" --basetemp=/tmp/kafkagen-t5 --durations=5 "$@"
[ "$RAN" = 1 ] || { log "no test ran"; exit 1; }
log "done"
