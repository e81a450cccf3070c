#include "runtime/cuda/attention_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/bench/bench_util.h"
#include "kernels/cuda_check.h"
#include "runtime/cuda/ops.h"
#include "runtime/error.h"

namespace gemlite {

namespace {

AttentionBenchOptions with_environment(AttentionBenchOptions options) {
  env_ints("GEMLITE_BENCH_CTX", &options.contexts);
  env_ints("GEMLITE_BENCH_CACHE", &options.caches);
  env_ints("GEMLITE_BENCH_SPLITS", &options.split_counts);
  for (const int capacity : options.caches)
    if (capacity < 0) throw Error("GEMLITE_BENCH_CACHE: a cache of " + std::to_string(capacity) + " positions");
  env_activations("GEMLITE_BENCH_ACT", &options.activations);
  return options;
}

// One decode step's attention of one layer: the token at position ctx - 1 over a cache of
// `capacity` positions (at least ctx), split as CudaKVCache splits it; `grouped`: by
// launch_attention_grouped (a block a kv head), else by launch_attention (a block a head).
void bench_decode(FILE* out, const AttentionBenchOptions& options, const AttentionShape& shape, int ctx,
                  int capacity, int split_count, DType act, bool grouped, const BenchSession& session) {
  cudaStream_t stream = session.stream;
  if (ctx < 1) throw Error("GEMLITE_BENCH_CTX: a context of " + std::to_string(ctx) + " positions (need >= 1)");
  capacity = std::max(capacity, ctx);
  const int hd = shape.head_dim, kv_dim = shape.n_kv_heads * hd;
  // The kernel reads and writes positions [0, ctx) only, so each copy holds those: the
  // capacity sets the split, and the copies rotate the bytes actually read through L2.
  const size_t cache_bytes = size_t(ctx) * kv_dim * 2;  // keys or values [ctx, kv_dim]
  const int copies = copies_for(2 * cache_bytes, options.rotation_bytes);
  std::vector<void*> keys(static_cast<size_t>(copies)), values(static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    CUDA_CHECK(cudaMalloc(&keys[size_t(c)], cache_bytes));
    CUDA_CHECK(cudaMalloc(&values[size_t(c)], cache_bytes));
    fill_values(static_cast<uint16_t*>(keys[size_t(c)]), int64_t(ctx) * kv_dim, act, 200 + 2 * uint32_t(c), stream);
    fill_values(static_cast<uint16_t*>(values[size_t(c)]), int64_t(ctx) * kv_dim, act, 201 + 2 * uint32_t(c), stream);
  }
  const int64_t qkv_elements = int64_t(shape.n_heads + 2 * shape.n_kv_heads) * hd;  // [1, q + 2 kv]
  const int64_t out_elements = int64_t(shape.n_heads) * hd;                        // [1, n_heads hd]
  void *qkv = nullptr, *y = nullptr;
  CUDA_CHECK(cudaMalloc(&qkv, size_t(qkv_elements) * 2));
  CUDA_CHECK(cudaMalloc(&y, size_t(out_elements) * 2));
  fill_values(static_cast<uint16_t*>(qkv), qkv_elements, act, 7, stream);
  std::vector<float> inv_freq(size_t(hd / 2));  // [hd / 2]
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(hd));
  float* inv_freq_device = nullptr;
  int* pos0 = nullptr;
  CUDA_CHECK(cudaMalloc(&inv_freq_device, inv_freq.size() * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(inv_freq_device, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
  const int position = ctx - 1;
  CUDA_CHECK(cudaMalloc(&pos0, sizeof(int)));
  CUDA_CHECK(cudaMemcpy(pos0, &position, sizeof(int), cudaMemcpyHostToDevice));
  // As CudaKVCache splits a cache of `capacity` positions.
  AttentionSplits splits = split_count > 0 ? attention_splits_of(capacity, split_count)
                           : grouped       ? attention_grouped_splits_for(capacity, shape.n_kv_heads, session.sms)
                                           : attention_splits_for(capacity, shape.n_heads, session.sms);
  float* partials = nullptr;  // [n_heads, count, hd + 2]
  unsigned* counters = nullptr;  // [n_heads]
  if (splits.count > 1) {
    CUDA_CHECK(cudaMalloc(&partials, size_t(shape.n_heads) * splits.count * (hd + 2) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&counters, size_t(shape.n_heads) * sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(counters, 0, size_t(shape.n_heads) * sizeof(unsigned)));
    splits.partials = partials;
    splits.counters = counters;
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));

  const double us = time_graph_us(stream, launches_for(copies), options.replays, [&](int i) {
    const size_t c = size_t(i % copies);
    if (grouped)
      launch_attention_grouped(keys[c], values[c], pos0, qkv, shape.n_heads, shape.n_kv_heads, hd, splits, y, act,
                               stream, inv_freq_device);
    else
      launch_attention(keys[c], values[c], pos0, qkv, 1, shape.n_heads, shape.n_kv_heads, hd, splits, y, act,
                       stream, inv_freq_device);
  });
  const double bytes = double(position) * kv_dim * 2 * 2 + double(qkv_elements + out_elements) * 2;
  const double gbs = bytes / us * 1e-3, copy_gbs = session.copy_gbs;
  const std::string cache = capacity > ctx ? " cache=" + std::to_string(capacity) : "";
  std::fprintf(out, "attention decode %s%s %d/%dx%d ctx=%d%s: %.1f us, %.0f GB/s, %.1f %% of copy, %d splits\n",
               grouped ? "grouped " : "", act_name(act), shape.n_heads, shape.n_kv_heads, hd, ctx, cache.c_str(), us,
               gbs,
               100.0 * gbs / copy_gbs, splits.count);
  std::fflush(out);

  for (void* p : keys) CUDA_CHECK(cudaFree(p));
  for (void* p : values) CUDA_CHECK(cudaFree(p));
  for (void* p : {qkv, y, static_cast<void*>(inv_freq_device), static_cast<void*>(pos0),
                  static_cast<void*>(partials), static_cast<void*>(counters)})
    CUDA_CHECK(cudaFree(p));
}

}  // namespace

void run_attention_benchmarks(FILE* out, const AttentionBenchOptions& given) {
  const AttentionBenchOptions options = with_environment(given);
  const BenchSession session(out);
  for (const DType act : options.activations)
    for (const AttentionShape& shape : options.shapes)
      for (const int capacity : options.caches)
        for (const int ctx : options.contexts)
          for (const int split_count : options.split_counts)
            for (const bool grouped : {false, true})
              if (!grouped || attention_grouped_supports(shape.n_heads, shape.n_kv_heads, shape.head_dim))
                bench_decode(out, options, shape, ctx, capacity, split_count, act, grouped, session);
}

}  // namespace gemlite
