#pragma once
// The end of split decode attention (attention_kernel in attention.cu, attention_grouped_kernel
// in attention_grouped.cu): every live split of a head has left (O [hd] unnormalised, its max
// in log2 units, its sum) in splits.partials [n_heads, count, hd + 2], and the block that
// took the head's last ticket combines them into out. The splits' maxima and sums go
// through shared memory once, so each output element is a sum of independent loads. (Each
// element had found the maximum and the weights itself, a chain of `count` dependent L2
// loads: with 32 splits that cost the grouped kernel more than its whole loop, 32/8 heads x
// 128 at ctx 4096 on an H200, 21.9 against 15.1-15.3 µs then, 13.4 with the loads in
// flight below: runtime/cuda/MEASURED.md.)
#include <cstdint>

#include "runtime/cuda/act_type.cuh"
#include "runtime/cuda/attention_launch.h"

namespace gemlite {

constexpr int kMaxMergedHeads = kGroupedMaxGroup;  // heads one block merges

// Heads head0 .. head0 + heads - 1 of out [n_heads, head_dim] from their live_splits
// partials; all threads of the block call it, after a __threadfence that orders the
// partials' reads after the ticket. PRECOND: live_splits <= kMaxAttentionSplits, heads <=
// kMaxMergedHeads (the launchers check the split count). Leaves the heads' counters to the
// caller. kBatch: the splits whose loads a thread has in flight at once (below).
template <typename Act, int kBatch>
__device__ void merge_split_partials(const AttentionSplits& splits, int live_splits, int head0, int heads,
                                     int head_dim, Act* out) {
  // [head][split]: the split's max, overwritten with its weight 2^(max - max_all).
  __shared__ float split_weight[kMaxMergedHeads][kMaxAttentionSplits];
  __shared__ float split_sum[kMaxMergedHeads][kMaxAttentionSplits];     // [head][split]
  __shared__ float head_sum[kMaxMergedHeads];                            // Σ over splits of weight x sum
  const int tid = int(threadIdx.x), threads = int(blockDim.x), stride = head_dim + 2;
  const float* first = splits.partials + int64_t(head0) * splits.count * stride;  // [heads, count, hd + 2]
  // Two elements a thread (head_dim is even, the rows 8-byte aligned), the loads of kBatch
  // splits issued before the first is used. The grouped kernel merges 32 splits of up to 8
  // heads in one L2 round trip a pair (kBatch 32; four elements a thread, eight scalar
  // loads in flight, had taken 16 dependent round trips, and llama3-8b q4g64 tg128 @ d4096
  // ran 451 / 448 against 481 / 482 tok/s with this and the grouped kernel's next-step
  // loads, of which those alone gave 454, one H200); attention_kernel, at 8 splits on
  // Llama-2-7B, keeps 8: 32 there cost its whole kernel 0.7 us at ctx 4096 (same registers;
  // not profiled).
  const int pairs = head_dim / 2;
  float2 piece[kBatch];  // elements d, d + 1 of splits s0 .. s0 + kBatch - 1
  const auto load_batch = [&](int item, int s0) {
    const float* part = first + int64_t(item / pairs) * splits.count * stride + 2 * (item % pairs);
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (s0 + j < live_splits) piece[j] = __ldcg(reinterpret_cast<const float2*>(part + int64_t(s0 + j) * stride));
  };
  // The first batch of this thread's first pair needs no weights: on its way beside the
  // maxima and sums, one L2 round trip for both. Kernel alone (fp16, cold L2, one H200):
  // grouped 32/8x128 ctx 4096 13.4 -> 11.8 us, ctx 16384 24.9 -> 23.0; attention_kernel
  // 0.2-0.3 us faster; llama3-8b q4g64 tg128 @ d4096 481.3 / 482.1 -> 483.2 / 483.8 tok/s.
  if (tid < heads * pairs) load_batch(tid, 0);
  for (int i = tid; i < heads * live_splits; i += threads) {
    const int r = i / live_splits, s = i % live_splits;
    const float* part = first + (int64_t(r) * splits.count + s) * stride;
    split_weight[r][s] = __ldcg(part + head_dim);
    split_sum[r][s] = __ldcg(part + head_dim + 1);
  }
  __syncthreads();
  if (tid < heads) {
    float max_all = -INFINITY;  // finite: split 0 holds position 0
    for (int s = 0; s < live_splits; ++s) max_all = fmaxf(max_all, split_weight[tid][s]);
    float total = 0;
    for (int s = 0; s < live_splits; ++s) {
      const float w = exp2f(split_weight[tid][s] - max_all);
      split_weight[tid][s] = w;
      total += w * split_sum[tid][s];
    }
    head_sum[tid] = total;
  }
  __syncthreads();
  for (int item = tid; item < heads * pairs; item += threads) {
    const int r = item / pairs, d = 2 * (item % pairs);
    float sum0 = 0, sum1 = 0;
    for (int s0 = 0; s0 < live_splits; s0 += kBatch) {
      if (item != tid || s0 != 0) load_batch(item, s0);
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (s0 + j < live_splits) {
          sum0 += split_weight[r][s0 + j] * piece[j].x;
          sum1 += split_weight[r][s0 + j] * piece[j].y;
        }
    }
    Act* y = out + int64_t(head0 + r) * head_dim + d;
    y[0] = from_float<Act>(sum0 / head_sum[r]);
    y[1] = from_float<Act>(sum1 / head_sum[r]);
  }
}

}  // namespace gemlite
