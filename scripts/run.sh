#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing (first time ~10-15 min, mostly
# the llama.cpp build, skipped when the run's servers are given), then `python -m launch.run` with any arguments given here
# (`bash scripts/run.sh --help`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# The run's servers given (--server, --serve, KAFKAGEN_SERVERS, --servers) and no --local-llm, or
# only help asked for: llama.cpp and its model are not needed, so a GPU host does not spend ~10
# minutes building them (scripts/with-llm.sh decides).
with_llm="$(bash scripts/with-llm.sh "$@")"
KAFKAGEN_WITH_LLM="${KAFKAGEN_WITH_LLM:-$with_llm}" bash scripts/setup-env.sh
export AWS_EC2_METADATA_DISABLED=true
exec "${KAFKAGEN_VENV:-$ROOT/.venv}/bin/python" -m launch.run "$@"
