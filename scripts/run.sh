#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing (first time ~10-15 min, mostly
# the llama.cpp build), then `python -m launch.run` with any arguments given here
# (`bash scripts/run.sh --help`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup-env.sh
export AWS_EC2_METADATA_DISABLED=true
exec "${KAFKAGEN_VENV:-$ROOT/.venv}/bin/python" -m launch.run "$@"
