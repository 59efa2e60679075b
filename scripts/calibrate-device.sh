#!/usr/bin/env bash
# Calibrates one GPU node: runs paceline-calibrate --quick and the PyTorch attention cross-check,
# and leaves the profile and every log in $OUT. Run from the repository root.
#
#   scripts/calibrate-device.sh             on the GPU node (OUT=<folder>; default ./build-device-out)
#   scripts/calibrate-device.sh --prepare   here: build .device/paceline-calibrate to carry there
#
# On the GPU node it (1) prints nvidia-smi and tool versions, (2) finds CUPTI, cuBLASLt, cuDNN,
# NCCL and NVRTC (CUDA's folders, then a PyTorch installation's nvidia/*/lib) for the loader,
# (3) uses the prebuilt .device/paceline-calibrate, or builds calibrate/ with cmake + ninja when
# that binary does not start, (4) runs paceline-calibrate --quick under a wall-clock guard,
# (5) runs calibrate/attention_torch.py on the same profile, (6) keeps the logs in $OUT.
# Everything is sized to finish within 6 minutes (PACELINE_TOTAL_S, default 360).
#
# Environment: OUT (output folder), PACELINE_PROFILE (file name, default h200-sxm-141gb.yaml),
# PACELINE_PYTHON (a python with torch), PACELINE_TOTAL_S (wall-clock budget in seconds).
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# --prepare: build the self-contained binary here, to be carried to the GPU node in .device/.
if [[ "${1:-}" == "--prepare" ]]; then
  set -e
  build="$ROOT/build-calibrate-device"
  cmake -S calibrate -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$build" paceline-calibrate
  mkdir -p .device
  cp "$build/paceline-calibrate" .device/paceline-calibrate
  echo "== ldd .device/paceline-calibrate (must list only glibc, libm, libgcc_s)"
  ldd .device/paceline-calibrate
  newest=$(objdump -T .device/paceline-calibrate | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  echo "== newest glibc symbol version needed: $newest (CUDA 13 images have glibc >= 2.35)"
  if [[ "$(printf '%s\nGLIBC_2.34\n' "$newest" | sort -V | tail -1)" != "GLIBC_2.34" ]]; then
    echo "warning: the binary needs $newest; it may not start on Ubuntu 22.04 images" >&2
  fi
  .device/paceline-calibrate --help >/dev/null
  .device/paceline-calibrate --plan --quick
  echo "ready: carry .device (run tool: carry [\".device\"])"
  exit 0
fi

T0=$SECONDS
TOTAL_S="${PACELINE_TOTAL_S:-360}"
OUT="${OUT:-$ROOT/build-device-out}"
mkdir -p "$OUT"
PROFILE="$OUT/${PACELINE_PROFILE:-h200-sxm-141gb.yaml}"
LOG="$OUT/calibrate-device.log"
exec > >(tee -a "$LOG") 2>&1
left() { echo $((TOTAL_S - (SECONDS - T0))); }
say() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - T0))s] $*"; }

# --- 1. The machine and its tools ----------------------------------------------------------
say "paceline calibrate-device: repository $ROOT, output $OUT, budget ${TOTAL_S}s"
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 30 nvidia-smi 2>&1 | tee "$OUT/nvidia-smi.txt"
  timeout 30 nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
  timeout 10 nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv
else
  say "nvidia-smi not found"
fi
for tool in nvcc cmake ninja g++ python3; do
  if command -v "$tool" >/dev/null 2>&1; then
    echo "$tool: $(command -v "$tool") $("$tool" --version 2>&1 | grep -Eo '[0-9]+\.[0-9]+(\.[0-9]+)?' | head -1)"
  else
    echo "$tool: not found"
  fi
done
uname -a; (ldd --version 2>&1 | head -1) || true

# A python with torch: $PACELINE_PYTHON, then the usual places.
PY=""
for candidate in "${PACELINE_PYTHON:-}" python3 python /usr/bin/python3 /opt/conda/bin/python /usr/local/bin/python3 \
    "$ROOT/.venv/bin/python" /opt/venv/bin/python /workspace/.venv/bin/python; do
  [[ -n "$candidate" ]] || continue
  command -v "$candidate" >/dev/null 2>&1 || [[ -x "$candidate" ]] || continue
  if timeout 90 "$candidate" -c "import torch" >/dev/null 2>&1; then PY="$candidate"; break; fi
done
if [[ -n "$PY" ]]; then
  say "python with torch: $PY"
  timeout 90 "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'gpus', torch.cuda.device_count())" || true
else
  say "no python with torch found: the attention cross-check will not run"
fi

# --- 2. Libraries for the loader -----------------------------------------------------------
ORIGINAL_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
ROOTS=(/usr/local/cuda/lib64 /usr/local/cuda/extras/CUPTI/lib64 /usr/local/cuda/targets/x86_64-linux/lib
       /usr/lib/x86_64-linux-gnu /usr/local/lib)
if [[ -n "$PY" ]]; then
  while IFS= read -r site; do
    [[ -d "$site/nvidia" ]] && ROOTS+=("$site/nvidia")
    [[ -d "$site/torch/lib" ]] && ROOTS+=("$site/torch/lib")
  done < <(timeout 60 "$PY" -c "import site, sys; print('\n'.join(site.getsitepackages() + [site.getusersitepackages()]))" 2>/dev/null)
fi
EXTRA_INCLUDES=()
add_library_dir() {  # add_library_dir <soname pattern>...: put the first folder holding one on the path
  local pattern found
  for pattern in "$@"; do
    found=$(timeout 30 find -L "${ROOTS[@]}" -maxdepth 4 -name "$pattern" -print -quit 2>/dev/null || true)
    if [[ -n "$found" ]]; then
      local dir; dir=$(dirname "$found")
      case ":${LD_LIBRARY_PATH:-}:" in *":$dir:"*) ;; *) LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}";; esac
      [[ -d "$dir/../include" ]] && EXTRA_INCLUDES+=("$(cd "$dir/../include" && pwd)")
      echo "  $pattern: $found"
      return 0
    fi
  done
  echo "  $*: not found"
}
say "locating libraries"
# Added in reverse order of preference: the last added comes first on the path.
# cuDNN compiles its attention kernels with NVRTC: the NVRTC of its own CUDA major version.
add_library_dir 'libnccl.so.2*'
add_library_dir 'libnvrtc.so.12*'
add_library_dir 'libnvrtc-builtins.so.12*'
add_library_dir 'libnvrtc.so.13*'
add_library_dir 'libnvrtc-builtins.so.13*'
add_library_dir 'libcublasLt.so.13*' 'libcublasLt.so.12*'
add_library_dir 'libcudnn.so.9*'
add_library_dir 'libcupti.so.13*'
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# --- 3. The binary: carried, or built here -------------------------------------------------
BIN="$ROOT/.device/paceline-calibrate"
if [[ -x "$BIN" ]] && ldd "$BIN" && "$BIN" --help >/dev/null 2>&1; then
  say "using the carried $BIN"
else
  say "the carried binary is missing or does not start; building calibrate/ here"
  build=/tmp/paceline-calibrate-build
  includes=$(IFS=';'; echo "${EXTRA_INCLUDES[*]:-}")
  if timeout 240 cmake -S calibrate -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" \
        -DPACELINE_EXTRA_INCLUDE_DIRS="$includes" > "$OUT/build.log" 2>&1 &&
     timeout 240 ninja -C "$build" paceline-calibrate >> "$OUT/build.log" 2>&1; then
    BIN="$build/paceline-calibrate"
    say "built $BIN"
  else
    say "build failed (see build.log):"; tail -20 "$OUT/build.log"
    BIN=""
  fi
fi

# --- 4. paceline-calibrate --quick ---------------------------------------------------------
# SM clock, power and temperature every half second while everything runs: sustained clocks
# under load, not the datasheet's boost, decide what kernels achieve.
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
    --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
  CLOCKS_PID=$!
fi
CAL_RC=-1
if [[ -n "$BIN" ]]; then
  "$BIN" --plan --quick
  # Leave at least 100 s for the cross-check and the wrap-up.
  budget=$(( $(left) - 100 )); (( budget > 230 )) && budget=230
  if (( budget < 30 )); then budget=30; fi
  say "paceline-calibrate --quick with --budget-s $budget"
  timeout -k 15 $((budget + 30)) "$BIN" --quick --output "$PROFILE" --budget-s "$budget" --verbose \
    > "$OUT/paceline-calibrate.log" 2>&1
  CAL_RC=$?
  tail -25 "$OUT/paceline-calibrate.log"
  say "paceline-calibrate exit status $CAL_RC"
  # A crash inside a library leaves its family marked "in progress": finish the others.
  if (( CAL_RC >= 124 )) && [[ -f "$PROFILE" ]]; then
    crashed=$(grep -E '^  [a-z_]+: "in progress' "$PROFILE" | sed -E 's/^  ([a-z_]+):.*/\1/' | head -1)
    budget=$(( $(left) - 100 ))
    if [[ -n "$crashed" ]] && (( budget >= 30 )); then
      say "$crashed crashed; resuming the other families with --skip $crashed"
      timeout -k 15 $((budget + 30)) "$BIN" --quick --output "$PROFILE" --budget-s "$budget" --skip "$crashed" \
        --verbose > "$OUT/paceline-calibrate-resume.log" 2>&1
      say "resume exit status $?"; tail -5 "$OUT/paceline-calibrate-resume.log"
    fi
  fi
fi

# A PyTorch check with at most CAP seconds of the budget, keeping RESERVE for what follows and
# skipped below MIN: torch_check SCRIPT CAP RESERVE MIN GRACE ARGS... (GRACE: the extra seconds
# timeout allows).
torch_check() {
  local script=$1 cap=$2 reserve=$3 min=$4 grace=$5; shift 5
  local budget=$(( $(left) - reserve )); (( budget > cap )) && budget=$cap
  local name; name=$(basename "$script" .py)
  if (( budget >= min )); then
    say "$name.py with --budget-s $budget"
    LD_LIBRARY_PATH="$ORIGINAL_LD_LIBRARY_PATH" timeout -k 10 $((budget + grace)) \
      "$PY" "$script" "$@" --budget-s "$budget" > "$OUT/$name.log" 2>&1
    say "$name.py exit status $?"; tail -8 "$OUT/$name.log"
  else
    say "no time left for $name.py"
  fi
}

# --- 5. The PyTorch cross-check of the attention table, then whole blocks in PyTorch: the
# end-to-end check of the kernel sum ---------------------------------------------------------
if [[ -n "$PY" ]]; then
  torch_check calibrate/attention_torch.py 120 25 20 20 --profile "$PROFILE"
  torch_check calibrate/layer_torch.py 60 15 15 30 --output "$OUT/layers.json"
fi
[[ -n "${CLOCKS_PID:-}" ]] && kill "$CLOCKS_PID" 2>/dev/null

# --- 7. Summary ----------------------------------------------------------------------------
if [[ -f "$PROFILE" ]]; then
  say "profile $PROFILE: $(wc -c < "$PROFILE") bytes"
  for table in memory_bound copies gemm collectives attention attention_crosscheck gemm_crosscheck; do
    rows=$(awk -v t="$table:" '$0 == t {on=1; next} /^[a-z_]+:/ {on=0} on && /^    - /' "$PROFILE" | wc -l)
    failed=$(awk -v t="$table:" '$0 == t {on=1; next} /^[a-z_]+:/ {on=0} on && /^    - / && /error:/' "$PROFILE" | wc -l)
    echo "  $table: $rows rows ($failed failed)"
  done
  sed -n '/^skipped:/,/^[a-z]/p' "$PROFILE"
else
  say "no profile was written"
fi
say "done in $((SECONDS - T0)) s (paceline-calibrate status $CAL_RC)"
