#!/usr/bin/env bash
# Installs what is missing, builds, and predicts one training step of a ready scenario.
#   scripts/demo.sh [SCENARIO] [paceline run options]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scenario="${1:-scenarios/gpt3-175b-1024xa100.yaml}"
shift || true
exec build/sim/cli/paceline run "$scenario" "$@"
