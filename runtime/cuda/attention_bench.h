#pragma once
// Kernel benchmark of the decode attention (launch_attention with one token, RoPE fused,
// split over the context as CudaKVCache splits it): the keys and values it reads, as a
// share of the copy bandwidth measured in the same run (docs/PERF.md's rules: cold L2 by
// rotating KV caches totalling > 256 MB, CUDA-graph replays timed with events, median,
// random data). One greppable line per measurement:
//   attention decode fp16 32/8x128 ctx=4096: 12.1 us, 2770 GB/s, 93.1 % of copy, 8 splits
// and, for heads launch_attention_grouped takes (grouped-query), a second line
// `attention decode grouped fp16 ...` of that kernel in the same run.
// GB/s counts the cache's keys and values at the ctx - 1 earlier positions (the token's own
// come from qkv), plus qkv and the output. Decode attention has no cuBLAS counterpart
// (scores, softmax and the weighted sum in one pass), so the copy is its reference.
#include <cstdio>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/backend.h"

namespace gemlite {

struct AttentionBenchOptions {
  // Llama-2-7B (32 heads, no GQA) and Llama-3-8B (8 kv heads: 4 query heads read each).
  std::vector<AttentionShape> shapes = {{32, 32, 128}, {32, 8, 128}};
  std::vector<int> contexts = {512, 4096, 16384};  // positions in the cache, the last the token's
  // The cache's capacity, which sets its split (attention_splits_for): 0 for each context's
  // own (a full cache); larger, a step part-way into a longer cache, as in a chat.
  std::vector<int> caches = {0};
  // Split counts (attention_splits_of): 0 for the launch rule's (attention_splits_for, or
  // attention_grouped_splits_for for the grouped kernel).
  std::vector<int> split_counts = {0};
  std::vector<DType> activations = {DType::F16, DType::BF16};
  size_t rotation_bytes = size_t(256) << 20;  // KV caches per measurement total at least this
  int replays = 20;                           // timed graph replays; the median is reported
};

// Runs on the current device; throws Error on any CUDA failure. GEMLITE_BENCH_CTX=4096,16384
// and GEMLITE_BENCH_ACT=fp16 narrow the contexts and activation types; GEMLITE_BENCH_CACHE=0,4096
// sets the capacities (a context above a capacity runs with a full cache), GEMLITE_BENCH_SPLITS=8,16
// the split counts.
void run_attention_benchmarks(FILE* out, const AttentionBenchOptions& options = {});

}  // namespace gemlite
