#!/usr/bin/env bash
# Configures and builds gemlite into build/ (CUDA on when nvcc is found; GEMLITE_CUDA=OFF
# to force the CPU-only build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cuda_flags=()
if [ -z "$(command -v nvcc)" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_flags+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGEMLITE_CUDA="${GEMLITE_CUDA:-AUTO}" "${cuda_flags[@]}"
cmake --build build -j "$(nproc)"
