#!/usr/bin/env bash
# THE GPU check: GPU tests, compute-sanitizer, kernel benchmarks. Two steps, because the
# GPU machine has CUDA, CMake and ninja but not our Debian libraries (docs/DEVICE.md):
#
#   here:   bash scripts/gpu-check.sh pack
#           builds for sm_90 into build-gpu/ and copies the GPU test binary, the bench
#           program (gemlite-bench --kernels) and the shared libraries they
#           need that the GPU machine lacks into .gpu/ (ignored by git, < 64 MiB).
#   there:  bash scripts/gpu-check.sh run
#           e.g. through the device tool: run(command="bash scripts/gpu-check.sh run",
#           carry=[".gpu"]). Runs the GPU tests, compute-sanitizer memcheck + racecheck on
#           a quick subset, the benchmarks, then scripts/compare_transformers.py; full logs go to .gpu/out,
#           and into $OUT as one archive, gpu-check-logs.tar.gz (the device tool returns at most 8
#           files; the archive is refreshed after each stage, so a run cut off at the call's time
#           limit still returns what it did), and a short table is printed last.
#
# Folders (environment, for both steps): GEMLITE_GPU_DIR (default .gpu: what travels; give
# each worktree its own, e.g. .gpu-fpx, and name it in carry), GEMLITE_GPU_BUILD (default
# build-gpu). Knobs for `run` (environment): GEMLITE_GPU_SKIP_TESTS=1, GEMLITE_GPU_SKIP_BENCH=1 (kernels),
# GEMLITE_GPU_SKIP_MODEL_BENCH=1, GEMLITE_GPU_MODELS="tinyllama-1.1b llama2-7b" (synthetic shapes),
# GEMLITE_GPU_FORMATS=q4g64,q8 (their formats; default q4g64,q8,fp6,f16),
# GEMLITE_GPU_DEPTH=4096 (also pp512/tg128 of q4g64 after that many tokens, llama-bench's -d,
# and tg128 there without the split decode attention),
# GEMLITE_GPU_SKIP_COMPARE=1 (transformers), GEMLITE_GPU_SKIP_SANITIZER=1, GEMLITE_GPU_TEST_FILTER=<gtest filter>,
# GEMLITE_BENCH_ARGS=<extra arguments of gemlite-bench --kernels>,
# GEMLITE_GPU_SASS=1 (disassemble the qN GEMV kernels into sass.txt; offline,
# scripts/sass_histogram.py counts a cubin's instructions by opcode),
# GEMLITE_GPU_BASE_REV=<git revision> (pack also builds that revision's gemlite-bench into
# <dir>/base/; run then times it against this build on the same machine, interleaved,
# instead of the plain benchmarks: the kernel benchmarks and the models' tg128, two rounds
# each, base first in round 1 and second in round 2; scripts/ab_summary.py prints the
# table. H100 machines differ by ~5 %: only such an A/B measures a change;
# GEMLITE_GPU_BASE_BIN=<path> takes that gemlite-bench as the base instead of building one
# (save build-gpu/gemlite-bench of the base before changing the tree: the base build costs
# a full build, ~15 minutes on 2 cores; GEMLITE_GPU_BASE_REV then only names it);
# GEMLITE_GPU_AB_REPS=2 times each model run with -r 2 instead of 3: a llama2-7b run of two
# formats took ~70 s at -r 3, so four of them are half of a 10-minute device call;
# GEMLITE_GPU_AB_PROMPTS=32,64 adds those prompt lengths (llama-bench's -p) to each model
# run, GEMLITE_GPU_AB_GENERATE=0 drops the tg128: a prefill A/B; a llama3-8b run of three
# prompt lengths took ~100 s, most of it building the random weights;
# GEMLITE_GPU_AB_DEPTH=0,4096 runs each test after that many tokens too, llama-bench's -d:
# a llama2-7b q4g64 run of -p 32,128,512 -n 0 -d 4096 -r 2 took ~50 s),
# GEMLITE_GPU_PROFILE="llama2-7b q4g64" (ncu time per kernel of a decode step and of a
# 512-token prefill of that synthetic model and format, eager and at ncu's locked clock;
# the whole-model bench's --trace lines, $out/trace.txt, show the step as the graph runs it),
# GEMLITE_GPU_SLICED_PROMPTS=16,24,32,48,64,96 (short prompts of llama2-7b q4g64 and q8 on
# the dense copy + cuBLAS, GEMLITE_GEMV_SLICED_MAX_M=8, then on gemv_qn slices, =128: where
# runtime/cuda/cuda_linear.cu's gemv_sliced_max_m() belongs).
set -euo pipefail
cd "$(dirname "$0")/.."
step="${1:-}"
dir="${GEMLITE_GPU_DIR:-.gpu}"
build="${GEMLITE_GPU_BUILD:-build-gpu}"

pack() {
  local nvcc=nvcc
  command -v nvcc >/dev/null || nvcc=/usr/local/cuda/bin/nvcc
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
  cmake --build "$build" -j "$(nproc)" --target gemlite-gpu-tests
  rm -rf "$dir" && mkdir -p "$dir"/lib
  cp "$build"/gemlite-gpu-tests "$dir"/
  cmake --build "$build" -j "$(nproc)" --target gemlite-bench gemlite-quantize gemlite-logits
  cp "$build"/gemlite-bench "$build"/gemlite-quantize "$build"/gemlite-logits "$dir"/
  # The real model the CUDA backend test reads (models/ beside the test binary), since
  # ../shared does not travel to the GPU machine.
  mkdir -p "$dir"/models
  cp ../shared/models/stories260K/stories260K.bin ../shared/models/aidreams260K/aidreams260K.bin "$dir"/models/
  # Libraries from outside the CUDA toolkit and the C runtime: the GPU machine (Ubuntu
  # 24.04) has libstdc++, libgcc and glibc of the same or newer versions, not these.
  for bin in "$dir"/gemlite-*; do
    ldd "$bin" | awk '/=> \// {print $3}' | grep -E 'libsentencepiece|libgomp|libprotobuf|libgtest' || true
  done | sort -u | while read -r lib; do cp -L "$lib" "$dir"/lib/; done
  if [ -n "${GEMLITE_GPU_BASE_BIN:-}" ]; then  # a base gemlite-bench built already
    mkdir -p "$dir"/base
    cp "$GEMLITE_GPU_BASE_BIN" "$dir"/base/gemlite-bench
    echo "${GEMLITE_GPU_BASE_REV:-prebuilt}" >"$dir"/base/REV
  elif [ -n "${GEMLITE_GPU_BASE_REV:-}" ]; then
    local base_tree="$build-base-src"
    rm -rf "$base_tree" && git worktree prune
    git worktree add --detach "$base_tree" "$GEMLITE_GPU_BASE_REV" >/dev/null
    cmake -S "$base_tree" -B "$base_tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
      -DCMAKE_CUDA_ARCHITECTURES=90a -DGEMLITE_TESTS=OFF >/dev/null
    cmake --build "$base_tree/build" -j "$(nproc)" --target gemlite-bench
    mkdir -p "$dir"/base
    cp "$base_tree/build/gemlite-bench" "$dir"/base/
    git -C "$base_tree" rev-parse --short HEAD >"$dir"/base/REV
    git worktree remove --force "$base_tree"
  fi
  du -sh "$dir"
  ls "$dir" "$dir"/lib
}

run() {
  local out="$dir/out"
  rm -rf "$out" && mkdir -p "$out"
  publish() { if [ -n "${OUT:-}" ]; then tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$out" . || true; fi; }
  export LD_LIBRARY_PATH="$PWD/$dir/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local tests="$dir"/gemlite-gpu-tests status=0
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$out/device.txt"

  if [ -z "${GEMLITE_GPU_SKIP_TESTS:-}" ]; then
    echo "== GPU tests"
    "$tests" --gtest_filter="${GEMLITE_GPU_TEST_FILTER:-*}" --gtest_output="xml:$out/tests.xml" \
      >"$out/tests.log" 2>&1 || status=1
    grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|FAILED|worst' "$out/tests.log" | tail -60 || true
    publish
  fi
  if [ -z "${GEMLITE_GPU_SKIP_TESTS:-}" ] && [ -z "${GEMLITE_GPU_SKIP_SANITIZER:-}" ]; then
    echo "== compute-sanitizer (quick subset)"
    # Without the every-group tests: hundreds of launches of kernels other tests cover (racecheck
    # took 96 s on one of them, the H200 run of 2026-11-28).
    local quick='CudaOps.*:PrefillAttention.*:AttentionSplits.*:AttentionFusedRope.*:AttentionGrouped.*:GemvQnFusedNorm.*:CudaGemvDense.FusedNorm*:DequantQn.*:GemvQnEdges.*:GemvQnSwiglu.*:*Bits3Group128*:*Bits6PerChannel*:*Bits1Group32*:*GemvS7*:GemmQnEdges.*:GemmQnS7.*:GemmFpxDecoding.*:GemmFpxEdges.*:GemmFpxFusedNorm.*:DequantFpx.*:CudaTopK.*:CudaBackendSampling.*:CudaBackendGreedy.*:CudaGraphDecode.*:*CudaBackendVsCpu*stories260K_q4g64:*CudaBackendVsCpu*aidreams260K_fp6-*EveryGroupHasItsOwnScale'
    compute-sanitizer --tool memcheck --error-exitcode 1 "$tests" --gtest_filter="$quick" \
      >"$out/sanitizer.log" 2>&1 || status=1
    compute-sanitizer --tool racecheck --error-exitcode 1 "$tests" --gtest_filter='CudaOps.*:PrefillAttention.*:AttentionSplits.*:AttentionFusedRope.*:AttentionGrouped.*:GemvQnFusedNorm.*:CudaGemvDense.FusedNorm*:GemvQnEdges.*:GemmFpxEdges.TiledKernelSmall:GemmQnEdges.SwigluPairWritesStoredOrder:GemmQnS7.*:GemmFpxFusedNorm.*:CudaTopK.AllNaN*:CudaBackendSampling.*:CudaBackendGreedy.*-*EveryGroupHasItsOwnScale' \
      >>"$out/sanitizer.log" 2>&1 || status=1
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$out/sanitizer.log" | tail -10 || true
    publish
  fi

  if [ -n "${GEMLITE_GPU_SASS:-}" ]; then
    cuobjdump -sass "$tests" | awk '/Function : .*gemv_qn_kernel/ {on=1} /Function : / && !/gemv_qn_kernel/ {on=0} on' \
      >"$out/sass.txt" || true
  fi

  if [ -n "${GEMLITE_GPU_PROFILE:-}" ]; then
    read -r model format <<<"$GEMLITE_GPU_PROFILE"
    # Eager (GEMLITE_NO_GRAPH=1: the same kernels, each its own launch for ncu; ncu runs them
    # one at a time, so PDL's overlap does not show). The bench runs one warm-up and one
    # timed pass of each test; ncu_summary divides by the forwards it saw (embeddings).
    local bench=("$dir"/gemlite-bench --device cuda --synthetic "$model" -f "$format" -r 1)
    echo "== profile: decode step of $model $format (ncu, per kernel)"
    GEMLITE_NO_GRAPH=1 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      "${bench[@]}" -p 0 -n 8 >"$out/ncu-decode.csv" 2>"$out/ncu.log" || status=1
    python3 scripts/ncu_summary.py "$out/ncu-decode.csv" | head -16 || true
    echo "== profile: 512-token prefill of $model $format (ncu, per kernel)"
    GEMLITE_NO_GRAPH=1 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      "${bench[@]}" -p 512 -n 0 >"$out/ncu-prefill.csv" 2>>"$out/ncu.log" || status=1
    python3 scripts/ncu_summary.py "$out/ncu-prefill.csv" | head -24 || true
  fi

  # With a base build the A/B below times this build (twice): the plain runs are skipped.
  local ab="" formats="${GEMLITE_GPU_FORMATS:-q4g64,q8,fp6,f16}"
  [ -x "$dir"/base/gemlite-bench ] && ab=1
  if [ -z "${GEMLITE_GPU_SKIP_BENCH:-}" ] && [ -z "$ab" ]; then
    echo "== benchmarks"
    "$dir"/gemlite-bench --kernels ${GEMLITE_BENCH_ARGS:-} >"$out/bench.log" 2>&1 || status=1
  fi

  if [ -s "$out/bench.log" ]; then
    echo "== table (copy bandwidth, then per shape: cuBLAS and each format; us, GB/s, % of copy, x cuBLAS)"
    grep -E '^(device|copy):' "$out/bench.log" || true
    # "<what>: T us, B GB/s, P % of copy[, X cuBLAS]" -> one aligned row
    awk -F': ' '/^(cublas|gemv|gemm|dequant|fpx|attention) / {n = split($2, v, ", "); sub(/ us/, "", v[1]); sub(/ GB\/s/, "", v[2]);
         sub(/ % of copy/, "", v[3]); x = n > 3 ? v[4] : ""; sub(/ cuBLAS/, "", x); c = n > 4 ? v[5] : "";
         printf "%-48s %9s us %6s GB/s %5s %% %7s %s\n", $1, v[1], v[2], v[3], x, c}' \
      "$out/bench.log" | tee "$out/table.txt"
    publish
  fi
  if [ -z "${GEMLITE_GPU_SKIP_MODEL_BENCH:-}" ] && [ -z "$ab" ]; then
    for model in ${GEMLITE_GPU_MODELS:-tinyllama-1.1b}; do
      echo "== whole model on the GPU (synthetic $model shape, random weights, batch 1)"
      # --trace: one decode step per format kernel by kernel (CUPTI), into trace.txt.
      "$dir"/gemlite-bench --device cuda --synthetic "$model" -f "$formats" -r 3 --trace \
        2>>"$out/model-bench.log" | tee -a "$out/model-bench.md" || status=1
      grep '^trace ' "$out/model-bench.log" >"$out/trace.txt" || true
      if [ -n "${GEMLITE_GPU_DEPTH:-}" ]; then
        "$dir"/gemlite-bench --device cuda --synthetic "$model" -f q4g64 -r 2 -d "$GEMLITE_GPU_DEPTH" \
          2>>"$out/model-bench.log" | tee -a "$out/model-bench.md" || status=1
        echo "(the same without the split decode attention: GEMLITE_NO_ATTENTION_SPLITS=1)"
        GEMLITE_NO_ATTENTION_SPLITS=1 "$dir"/gemlite-bench --device cuda --synthetic "$model" -f q4g64 -r 2 -p 0 \
          -d "$GEMLITE_GPU_DEPTH" 2>>"$out/model-bench.log" | tee -a "$out/model-bench.md" || status=1
      fi
      publish
    done
  fi
  if [ -n "$ab" ]; then
    echo "== A/B: base $(cat "$dir"/base/REV) against this build, same machine, interleaved"
    rm -f "$out"/ab-kernels-*.log "$out"/ab-models-*.md  # rounds of an earlier run into the same folder
    # The order alternates: with base first in both rounds, code that had not changed
    # measured 1.6 % slower as "this" (sixth session, q4g64 tg128 454.5 vs 447.1).
    local order
    for round in 1 2; do
      order="base this"
      [ "$round" = 2 ] && order="this base"
      for side in $order; do
        local bin="$dir"/gemlite-bench
        [ "$side" = base ] && bin="$dir"/base/gemlite-bench
        [ -n "${GEMLITE_GPU_SKIP_BENCH:-}" ] ||
          "$bin" --kernels ${GEMLITE_BENCH_ARGS:-} >"$out/ab-kernels-$side-$round.log" 2>&1 || status=1
        if [ -z "${GEMLITE_GPU_SKIP_MODEL_BENCH:-}" ]; then
          for model in ${GEMLITE_GPU_MODELS:-tinyllama-1.1b}; do
            "$bin" --device cuda --synthetic "$model" -f "$formats" -p "${GEMLITE_GPU_AB_PROMPTS:-0}" \
              -n "${GEMLITE_GPU_AB_GENERATE:-128}" -r "${GEMLITE_GPU_AB_REPS:-3}" -d "${GEMLITE_GPU_AB_DEPTH:-0}" \
              2>>"$out/model-bench.log" >>"$out/ab-models-$side-$round.md" || status=1
          done
        fi
        publish
      done
    done
    python3 scripts/ab_summary.py "$out" | tee "$out/ab.txt" || status=1
  fi
  if [ -n "${GEMLITE_GPU_SLICED_PROMPTS:-}" ]; then
    echo "== short prompts: dense copy + cuBLAS (GEMLITE_GEMV_SLICED_MAX_M=8), then gemv_qn slices (=128)"
    for max_m in 8 128; do
      GEMLITE_GEMV_SLICED_MAX_M=$max_m "$dir"/gemlite-bench --device cuda --synthetic llama2-7b -f q4g64,q8 \
        -p "$GEMLITE_GPU_SLICED_PROMPTS" -n 0 -r 3 2>>"$out/model-bench.log" | sed "s/^/max_m=$max_m /" |
        tee -a "$out/sliced.md" || status=1
    done
  fi
  if [ -z "${GEMLITE_GPU_SKIP_COMPARE:-}" ]; then
    echo "== against Hugging Face transformers (random models, 64-token prompt)"
    python3 scripts/compare_transformers.py --bin "$dir" --out /tmp/gemlite-compare \
      2>"$out/compare.log" | tee "$out/compare.txt" || status=1
  fi
  publish
  [ "$status" -eq 0 ] && echo "gpu-check: OK" || echo "gpu-check: FAILURES (logs: $out, and gpu-check-logs.tar.gz in \$OUT)"
  return "$status"
}

# Perplexity of the real Hugging Face checkpoint on the GPU (the README's table): here,
# `bash scripts/gpu-check.sh pack-perplexity FORMAT` (folder .gpu-ppl unless
# GEMLITE_GPU_DIR says otherwise) quantizes
# ../shared/models/gutenberg-llama-25m to FORMAT (one model a pack: each is ~40 MiB of the
# 64 MiB that travel) beside gemlite-perplexity and the held-out text; there,
# `bash scripts/gpu-check.sh run-perplexity` (carry .gpu-ppl)
# scores its first 8 chunks of 512 (the CPU backend's table in the README, to compare)
# and the whole text, with fp16 and with bf16 activations.
ppl_text=pg1342-pride-and-prejudice.txt
pack_perplexity() {
  local format="${1:?pack-perplexity FORMAT}" nvcc=nvcc
  command -v nvcc >/dev/null || nvcc=/usr/local/cuda/bin/nvcc
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
  cmake --build "$build" -j "$(nproc)" --target gemlite-perplexity gemlite-quantize
  rm -rf "$dir" && mkdir -p "$dir"/lib
  cp "$build"/gemlite-perplexity "$dir"/
  { ldd "$dir"/gemlite-perplexity | awk '/=> \// {print $3}' | grep -E 'libsentencepiece|libgomp|libprotobuf' || true; } |
    while read -r lib; do cp -L "$lib" "$dir"/lib/; done
  "$build"/gemlite-quantize ../shared/models/gutenberg-llama-25m "$dir/gutenberg-llama-25m-$format" "$format"
  cp "../shared/data/gutenberg/$ppl_text" "$dir"/
  du -sh "$dir"
}
run_perplexity() {
  local out="${OUT:-$dir/out}" status=0
  mkdir -p "$out"
  export LD_LIBRARY_PATH="$PWD/$dir/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  for model in "$dir"/gutenberg-llama-25m-*; do
    for dtype in f16 bf16; do
      for chunks in 8 -1; do
        echo "== $(basename "$model") --dtype $dtype --chunks $chunks"
        "$dir"/gemlite-perplexity --device cuda --dtype "$dtype" -m "$model" -f "$dir/$ppl_text" --chunks "$chunks" \
          >"$out/ppl-$(basename "$model")-$dtype-$chunks.log" 2>&1 || status=1
        grep -iE "final|per pass|backend=|tokens/s" "$out/ppl-$(basename "$model")-$dtype-$chunks.log" || true
      done
    done
  done
  return "$status"
}

case "$step" in
  pack) pack ;;
  run) run ;;
  pack-perplexity | run-perplexity)
    # Never the folder of `pack` (pack-perplexity empties its folder first).
    [ -n "${GEMLITE_GPU_DIR:-}" ] || dir=.gpu-ppl
    if [ "$step" = pack-perplexity ]; then pack_perplexity "${2:-}"; else run_perplexity; fi ;;
  *) echo "usage: bash scripts/gpu-check.sh pack|run|pack-perplexity FORMAT|run-perplexity (see the top of this file)" >&2
     exit 2 ;;
esac
