#!/usr/bin/env bash
# Prints 1 when `scripts/run.sh ARGS` needs llama.cpp and its model (the `llm` extra: ~10 minutes
# to build once), else 0. Needed for the embedded default only (launch/run/servers.py): not when the
# run's servers are given (--server, --serve, the servers setting: KAFKAGEN_SERVERS or --servers),
# nor for help (-h, --help, --settings-help); --local-llm asks for it whatever else is given.
set -euo pipefail
with_llm=1
[ -n "${KAFKAGEN_SERVERS:-}" ] && with_llm=0
for arg in "$@"; do
  case "$arg" in
    --server | --server=* | --serve | --serve=* | --servers | --servers=*) with_llm=0 ;;
    -h | --help | --settings-help) with_llm=0 ;;
  esac
done
for arg in "$@"; do
  case "$arg" in --local-llm) with_llm=1 ;; esac
done
echo "$with_llm"
