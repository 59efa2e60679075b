#!/usr/bin/env bash
# Regenerates the golden results (tests/golden/<scenario>.json) of the ready scenarios
# (scenarios/*.yaml) after an intended change of the predictions, and lists what moved.
# Review the diff and commit it with the change that caused it.
#   scripts/update-golden.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
rm -f tests/golden/*.json
PACELINE_UPDATE_GOLDEN=1 build/tests/golden/golden_test --gtest_filter='ReadyScenarios/*' >/dev/null
build/tests/golden/golden_test --gtest_brief=1
echo "updated: $(ls tests/golden/*.json | wc -l) golden results in tests/golden/"
if command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1; then
  git --no-pager diff --stat -- tests/golden
fi
