#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the C++ and Python suites (ctest) and
# the validation ratchet (public MAPE, as it is and with the software its sources state,
# peak-memory MAPE with that software, and the MAPE of the Megatron-Bridge dense and
# mixture-of-experts runs kept apart must not rise above the values in tests/validation_ratchet).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
(cd build && ctest --output-on-failure -j "$jobs")
mapfile -t limits < <(grep -v '^#' tests/validation_ratchet)
build/sim/cli/paceline validate scenarios/validation/public.yaml --max-mape "${limits[0]}" | tail -n 25
build/sim/cli/paceline validate scenarios/validation/public.yaml --overlay scenarios/validation/stated-software.yaml \
  --max-mape "${limits[1]}" --max-memory-mape "${limits[2]}" | tail -n 21
build/sim/cli/paceline validate scenarios/validation/megatron-bridge.yaml --max-mape "${limits[3]}" | tail -n 14
build/sim/cli/paceline validate scenarios/validation/megatron-bridge-moe.yaml --max-mape "${limits[4]}" | tail -n 10

# Reliability (README.md, "Reliability"). PACELINE_RELIABILITY=0 skips it for a quick local run.
if [[ "${PACELINE_RELIABILITY:-1}" != 0 ]]; then
  # clang 14 with its sanitizer and libFuzzer runtimes, for the fuzz build.
  scripts/install-packages.sh clang-14 libclang-rt-14-dev
  # The whole C++ suite again under AddressSanitizer + UndefinedBehaviorSanitizer (build-sanitize/):
  # a leak, an invalid access or undefined behaviour fails its test.
  [[ -f build-sanitize/build.ninja ]] || cmake --preset sanitize >/dev/null
  cmake --build build-sanitize
  (cd build-sanitize &&
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:strict_init_order=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --output-on-failure -j "$jobs")
  # Every input reader fuzzed for a bounded time (clang + libFuzzer, build-fuzz/).
  tests/fuzz/fuzz.sh --seconds "${PACELINE_FUZZ_SECONDS:-20}"
fi
