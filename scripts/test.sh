#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the C++ and Python suites (ctest) and
# the validation ratchet (public MAPE must not rise above the value in tests/validation_ratchet).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
(cd build && ctest --output-on-failure -j "$jobs")
limit=$(grep -v '^#' tests/validation_ratchet | head -n 1)
build/sim/cli/paceline validate scenarios/validation/public.yaml --max-mape "$limit" | tail -n 25
