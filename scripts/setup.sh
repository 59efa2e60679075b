#!/usr/bin/env bash
# Installs what paceline needs from Debian (only what is missing), then configures and builds
# incrementally in build/. Used by scripts/demo.sh and scripts/test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ libboost-graph-dev libeigen3-dev libfmt-dev libyaml-cpp-dev
          libgtest-dev libbenchmark-dev pybind11-dev python3-dev python3-pybind11 python3-pytest
          python3-numpy python3-pandas python3-matplotlib python3-yaml
          python3-tqdm python3-distributed python3-nbconvert python3-nbclient python3-ipykernel)
scripts/install-packages.sh "${packages[@]}"

# CUDA (for paceline-calibrate) is used where the toolkit is installed; nvcc may not be on PATH.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if [[ ! -f build/build.ninja ]]; then
  cmake --preset release >/dev/null
fi
cmake --build build
