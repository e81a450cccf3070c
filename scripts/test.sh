#!/usr/bin/env bash
# Builds gemlite and runs every CPU test (GPU tests carry the label "gpu" and run on the
# GPU machine through scripts/gpu-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build -LE gpu --output-on-failure -j "$(nproc)"
