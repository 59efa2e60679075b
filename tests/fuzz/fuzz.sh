#!/usr/bin/env bash
# Builds paceline's libFuzzer harnesses (clang 14, ASan + UBSan, build-fuzz/) and runs each for
# a bounded time over its seed corpus; fails if any harness finds a crash, a wrong exception,
# a leak, a timeout or undefined behaviour.
#
#   tests/fuzz/fuzz.sh [--seconds N] [--jobs N] [HARNESS...]
#
# --seconds N   fuzzing time per harness (default $PACELINE_FUZZ_SECONDS, else 20)
# --jobs N      harnesses run at once (default: the number of cores)
# HARNESS       scenario unit_parse hf_config gpu_catalog model_catalog link_catalog profile
#               simulate overlay result (default: all)
#
# Seeds are generated into build-fuzz/fuzz/seeds by tests/fuzz/make_seeds.py; what the fuzzers
# learn accumulates in build-fuzz/fuzz/corpus/<harness> across runs; a failing input is saved as
# build-fuzz/fuzz/artifacts/<harness>/crash-* (reproduce: build-fuzz/tests/fuzz/<harness>_fuzzer FILE).
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds="${PACELINE_FUZZ_SECONDS:-20}"
jobs="$(nproc)"
harnesses=()
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
((${#harnesses[@]})) || harnesses=(scenario unit_parse hf_config gpu_catalog model_catalog link_catalog profile simulate overlay result)

if ! command -v clang++-14 >/dev/null; then
  echo "paceline fuzz: clang++-14 is missing (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi
[[ -f build-fuzz/build.ninja ]] || cmake --preset fuzz >/dev/null
cmake --build build-fuzz --target fuzzers
work=build-fuzz/fuzz
/usr/bin/python3 tests/fuzz/make_seeds.py "$work/seeds" >/dev/null

# Leaks are errors; undefined behaviour stops the run with a stack.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

run_one() {
  local harness="$1"
  mkdir -p "$work/corpus/$harness" "$work/artifacts/$harness"
  local rc=0 max_len=16384 seeds="$harness"
  [[ $harness == profile ]] && max_len=32768  # its seeds are cut-down profiles of 9–27 KB
  [[ $harness == simulate ]] && seeds=scenario
  "build-fuzz/tests/fuzz/${harness}_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=$max_len -dict=tests/fuzz/yaml.dict -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$harness/" "$work/corpus/$harness" "$work/seeds/$seeds" \
    > "$work/$harness.log" 2>&1 || rc=$?
  echo "$rc" > "$work/$harness.status"
}

status=0
running=0
for harness in "${harnesses[@]}"; do
  rm -f "$work/$harness.status"
  run_one "$harness" &
  if ((++running >= jobs)); then wait -n || true; ((running--)) || true; fi
done
wait
# corpus: the inputs libFuzzer kept at the end (seeds and finds); saved: files in its corpus folder.
printf '%-14s %12s %8s %8s  %s\n' harness executions corpus saved result
for harness in "${harnesses[@]}"; do
  if [[ "$(cat "$work/$harness.status" 2>/dev/null)" == 0 ]]; then result=ok; else result="FAILED (see $work/$harness.log)"; status=1; fi
  executions=$(grep -ao 'stat::number_of_executed_units: [0-9]*' "$work/$harness.log" | grep -o '[0-9]*$' || echo "?")
  corpus=$(grep -ao 'corp: [0-9]*' "$work/$harness.log" | tail -1 | grep -o '[0-9]*$' || echo "?")
  saved=$(find "$work/corpus/$harness" -type f | wc -l)
  printf '%-14s %12s %8s %8s  %s\n' "$harness" "$executions" "$corpus" "$saved" "$result"
  if [[ $result != ok ]]; then grep -aE 'ERROR|property violated|SUMMARY|Test unit written' "$work/$harness.log" | head -5; fi
done
exit $status
