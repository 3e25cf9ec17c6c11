#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what is missing (venv, Kafka jars, SeaweedFS,
# llama.cpp, the model), starts the local stack and the 3-broker Kafka cluster beside it, runs lint,
# type checks and pytest, and always stops both again (set KAFKAGEN_KEEP_STACK=1 to leave it running). Extra arguments go to
# pytest, e.g. `bash scripts/test.sh tests/consumers -k offsets`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# with Chromium (Debian's package) for the dashboard's browser test (tests/launch/test_dashboard.py)
KAFKAGEN_WITH_BROWSER="${KAFKAGEN_WITH_BROWSER:-1}" bash scripts/setup-env.sh
VENV="${KAFKAGEN_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
export AWS_EC2_METADATA_DISABLED=true

log() { printf '[test %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
stop_stack() {
  [ "${KAFKAGEN_KEEP_STACK:-0}" = 1 ] && return
  "$PY" -m launch.stack --cluster3 down || true
  "$PY" -m launch.stack down || true
}
trap stop_stack EXIT

log "starting the local stack"
"$PY" -m launch.stack up
# The 3-broker cluster beside it (home .local/cluster3, brokers on the Kafka port + 2, + 4, + 6):
# the crash and rebalance tests run on it as well as on the single broker.
log "starting the 3-broker test cluster"
"$PY" -m launch.stack --cluster3 up
log "lint and type checks"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy" .  # every package (pyproject.toml excludes .venv and .local)
log "pytest"
"$PY" -m pytest -q -p no:cacheprovider --durations=15 "$@"
log "done"
