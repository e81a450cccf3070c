// RoPE + KV store, and causal grouped-query attention over the KV cache (fp16 or bf16) one
// block per (head, token) for decode and short chunks, fp32 math like runtime/cpu/cpu_backend.cpp. The context can be thousands of positions, so
// positions go through in chunks of kAttentionThreads with an online softmax (running max
// and sum, the accumulator rescaled per chunk): nothing per position is kept beyond a chunk.
#include "runtime/cuda/ops.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/pdl.cuh"
#include "runtime/cuda/act_type.cuh"

namespace gemlite {
namespace {

constexpr int kChunk = kAttentionThreads;  // positions scored per round: one per thread

// RoPE on q (in place) and k, and the rotated k and v -> the cache at positions *pos0 + t:
// one launch where rope + two copies were three. A kernel, not a memcpy at a
// host-computed offset, so the position can change between graph replays.
// One element of work per thread: pair j (i = j % half of head j / half: heads [0, n_heads)
// of q, then [0, n_kv) of k) and element j of v. A single block looping over 4096 pairs
// took 11.9 us a layer at Llama-2-7B decode (ncu, H100): each iteration waited on its
// loads, which the compiler may not hoist above the stores that could alias them.
// PRECOND: grid (T, ceil(max(pairs, kv_dim) / blockDim.x)), pairs = (n_heads + n_kv) * hd/2.
template <typename Act>
__global__ void rope_store_kernel(Act* qkv, int64_t qkv_stride, Act* key_cache, Act* value_cache, const int* pos0,
                                  const float* inv_freq, int n_heads, int n_kv_heads, int head_dim) {
  pdl_launch_dependents();  // a PDL successor (the GEMVs) may start now (kernels/pdl.cuh)
  const int64_t t = blockIdx.x;
  const int j = int(blockIdx.y * blockDim.x + threadIdx.x);
  const int pos = *pos0 + int(t), half = head_dim / 2, q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
  Act* row = qkv + t * qkv_stride;  // [q_dim + 2 kv_dim]: q, k, v
  if (j < (n_heads + n_kv_heads) * half) {
    const int head = j / half, i = j % half;
    const float angle = float(pos) * inv_freq[i];  // fp32 like the CPU and Hugging Face
    float sin_a, cos_a;
    sincosf(angle, &sin_a, &cos_a);
    Act* x = row + head * head_dim;  // [hd] q heads, then k heads
    const float a = to_float(x[i]), b = to_float(x[i + half]);
    const Act rotated_a = from_float<Act>(a * cos_a - b * sin_a), rotated_b = from_float<Act>(b * cos_a + a * sin_a);
    if (head < n_heads) {
      x[i] = rotated_a;
      x[i + half] = rotated_b;
    } else {
      Act* key = key_cache + int64_t(pos) * kv_dim + (head - n_heads) * head_dim;  // [hd]
      key[i] = rotated_a;
      key[i + half] = rotated_b;
    }
  }
  if (j < kv_dim) value_cache[int64_t(pos) * kv_dim + j] = row[q_dim + kv_dim + j];
}

// The dot product of 8 stored values (one 16-byte load) with q [8] (fp32, shared memory).
template <typename Act>
__device__ __forceinline__ float dot8_of(const uint4& packed, const float* q) {
  using Pair = typename PairOf<Act>::type;
  const Pair* pairs = reinterpret_cast<const Pair*>(&packed);
  float sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = to_float2(pairs[i]);
    sum += q[2 * i] * f.x + q[2 * i + 1] * f.y;
  }
  return sum;
}

// grid.x = T * n_heads (block b: head b % n_heads of token b / n_heads; on x, whose limit
// is 2^31 - 1, not on y with its 65535), grid.y = splits.count, blockDim.x = kAttentionThreads.
// With several splits (decode, AttentionSplits), block (b, s) attends to positions
// [s * span, (s + 1) * span) only and leaves its (max, sum, acc [hd]) in splits.partials;
// the last block of b to finish (a ticket from splits.counters) merges them into out and
// resets the counter, so no second launch is needed and graph replays find it at zero.
// PRECOND: head_dim <= kAttentionThreads.
// For the weighted sum of values, thread i owns dimension d = i % hd of position lane
// i / hd (n_lanes = blockDim / hd lanes; threads past the last whole lane idle), so each
// value row is read by hd neighbouring threads; lanes are summed at the end.
template <typename Act>
__global__ void attention_kernel(const Act* key_cache, const Act* value_cache, const Act* q, int64_t q_stride,
                                 const int* pos0, int n_heads, int group, int head_dim, int kv_dim, float scale,
                                 AttentionSplits splits, Act* out) {
  pdl_launch_dependents();  // a PDL successor (the GEMVs) may start now (kernels/pdl.cuh)
  __shared__ float query[kAttentionThreads];    // [hd]
  __shared__ float weights[kChunk];             // [chunk] exp(score - running max)
  __shared__ float partial[kAttentionThreads];  // [n_lanes, hd] per-lane sums
  const int h = int(blockIdx.x % unsigned(n_heads)), t = int(blockIdx.x / unsigned(n_heads)), tid = threadIdx.x;
  const int n_pos = *pos0 + t + 1;  // causal: positions [0, pos0 + t]
  const int begin = int(blockIdx.y) * splits.span, end = min(n_pos, begin + splits.span);  // this block's
  const int kv_offset = (h / group) * head_dim;
  const int64_t row = (int64_t(t) * n_heads + h) * head_dim;  // this head in out [T, n_heads*hd]
  for (int i = tid; i < head_dim; i += blockDim.x) query[i] = to_float(q[t * q_stride + h * head_dim + i]);
  __syncthreads();

  const int d = tid % head_dim, lane = tid / head_dim, n_lanes = blockDim.x / head_dim;
  float running_max = -INFINITY, running_sum = 0, acc = 0;
  for (int c0 = begin; c0 < end; c0 += kChunk) {
    const int p = c0 + tid;
    float score = -INFINITY;
    if (p < end) {
      const Act* key = key_cache + int64_t(p) * kv_dim + kv_offset;  // [hd]
      float dot = 0;
      if (head_dim % 8 == 0) {
        // 16-byte loads, unrolled so several are in flight, instead of one scalar load
        // after another (with the unrolled value loop below; H100, Llama-2-7B q4g64:
        // pp512 5662 -> 9532 tok/s, tg128 202 -> 220; TinyLlama pp512 16.8k -> 28.6k).
        const uint4* chunks = reinterpret_cast<const uint4*>(key);  // [hd / 8]
#pragma unroll 4
        for (int c = 0; c < head_dim / 8; ++c) dot += dot8_of<Act>(chunks[c], query + 8 * c);
      } else {
        for (int i = 0; i < head_dim; ++i) dot += query[i] * to_float(key[i]);
      }
      score = dot * scale;
    }
    // The chunk holds position c0 < end, so new_max is finite; exp(-inf) = 0 on the first.
    const float new_max = fmaxf(running_max, block_reduce(score, MaxOp{}));
    const float e = p < end ? expf(score - new_max) : 0.0f;
    weights[tid] = e;
    const float chunk_sum = block_reduce(e, SumOp{});  // its __syncthreads publish `weights`
    const float rescale = expf(running_max - new_max);
    running_sum = running_sum * rescale + chunk_sum;
    running_max = new_max;
    if (lane < n_lanes) {
      acc *= rescale;
      const int in_chunk = min(kChunk, end - c0);
      const Act* column = value_cache + int64_t(c0) * kv_dim + kv_offset + d;  // [in_chunk] stride kv_dim
      int j = lane;
      // Eight value loads in flight per thread, as for the keys.
      for (; j + 7 * n_lanes < in_chunk; j += 8 * n_lanes) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = to_float(column[int64_t(j + u * n_lanes) * kv_dim]);
#pragma unroll
        for (int u = 0; u < 8; ++u) acc += weights[j + u * n_lanes] * v[u];
      }
      for (; j < in_chunk; j += n_lanes) acc += weights[j] * to_float(column[int64_t(j) * kv_dim]);
    }
    __syncthreads();  // the next chunk rewrites `weights`
  }
  if (lane < n_lanes) partial[lane * head_dim + d] = acc;
  __syncthreads();
  if (splits.count == 1) {
    if (tid < head_dim) {
      float sum = 0;
      for (int l = 0; l < n_lanes; ++l) sum += partial[l * head_dim + tid];
      out[row + tid] = from_float<Act>(sum / running_sum);
    }
    return;
  }
  // This split's (acc [hd], max, sum) -> partials [T * n_heads, count, hd + 2]; an empty
  // split (begin >= n_pos) leaves (0, -inf, 0), which the merge weighs by exp(-inf) = 0.
  const int stride = head_dim + 2;
  float* mine = splits.partials + (int64_t(blockIdx.x) * splits.count + blockIdx.y) * stride;
  if (tid < head_dim) {
    float sum = 0;
    for (int l = 0; l < n_lanes; ++l) sum += partial[l * head_dim + tid];
    mine[tid] = sum;
  }
  if (tid == 0) {
    mine[head_dim] = running_max;
    mine[head_dim + 1] = running_sum;
  }
  __threadfence();  // the partial is visible device-wide before the ticket is taken
  __syncthreads();
  __shared__ bool last;
  if (tid == 0) last = atomicAdd(&splits.counters[blockIdx.x], 1u) == unsigned(splits.count) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float* all = splits.partials + int64_t(blockIdx.x) * splits.count * stride;  // [count, hd + 2]
  float max_all = -INFINITY;
  for (int s = 0; s < splits.count; ++s) max_all = fmaxf(max_all, __ldcg(all + s * stride + head_dim));
  if (tid < head_dim) {
    float sum = 0, weight = 0;
    for (int s = 0; s < splits.count; ++s) {
      const float w = expf(__ldcg(all + s * stride + head_dim) - max_all);  // split 0 holds position 0: max finite
      sum += w * __ldcg(all + s * stride + tid);
      weight += w * __ldcg(all + s * stride + head_dim + 1);
    }
    out[row + tid] = from_float<Act>(sum / weight);
  }
  if (tid == 0) splits.counters[blockIdx.x] = 0;  // ready for the next launch
}

}  // namespace

AttentionSplits attention_splits_for(int capacity) {
  AttentionSplits splits;
  const int per_split = (capacity + kMaxAttentionSplits - 1) / kMaxAttentionSplits;
  splits.span = std::max(kAttentionThreads, (per_split + kAttentionThreads - 1) / kAttentionThreads * kAttentionThreads);
  splits.count = std::max(1, (capacity + splits.span - 1) / splits.span);
  return splits;
}

void launch_rope_store(void* key_cache, void* value_cache, const int* pos0, const float* inv_freq, void* qkv,
                       int64_t T, int n_heads, int n_kv_heads, int head_dim, DType act, cudaStream_t stream) {
  if (head_dim < 2 || head_dim % 2 != 0)
    throw Error("cuda rope: head_dim " + std::to_string(head_dim) + " (need an even head_dim)");
  const int kv_dim = n_kv_heads * head_dim;
  const int64_t qkv_stride = int64_t(n_heads + 2 * n_kv_heads) * head_dim;
  constexpr int kRopeThreads = 128;
  const int rope_work = std::max((n_heads + n_kv_heads) * (head_dim / 2), kv_dim);  // threads per token
  const dim3 rope_grid(unsigned(T), unsigned((rope_work + kRopeThreads - 1) / kRopeThreads));
  dispatch_act(act, "rope", [&](auto tag) {
    using Act = decltype(tag);
    rope_store_kernel<Act><<<rope_grid, kRopeThreads, 0, stream>>>(
        static_cast<Act*>(qkv), qkv_stride, static_cast<Act*>(key_cache), static_cast<Act*>(value_cache), pos0,
        inv_freq, n_heads, n_kv_heads, head_dim);
    CHECK_LAST_LAUNCH("rope_store_kernel");
  });
}

void launch_attention(const void* key_cache, const void* value_cache, const int* pos0, const void* qkv, int64_t T,
                      int n_heads, int n_kv_heads, int head_dim, const AttentionSplits& splits, void* out, DType act,
                      cudaStream_t stream) {
  if (head_dim < 2 || head_dim % 2 != 0 || head_dim > kAttentionThreads || n_kv_heads < 1 || n_heads % n_kv_heads != 0)
    throw Error("cuda attention: head_dim " + std::to_string(head_dim) + " with " + std::to_string(n_heads) +
                " heads / " + std::to_string(n_kv_heads) + " kv heads (need head_dim <= " +
                std::to_string(kAttentionThreads) + ", even, and n_heads a multiple of n_kv_heads)");
  const int kv_dim = n_kv_heads * head_dim;
  const int64_t qkv_stride = int64_t(n_heads + 2 * n_kv_heads) * head_dim;
  if (splits.count < 1 || splits.span < 1 || (splits.count > 1 && (T != 1 || !splits.partials || !splits.counters)))
    throw Error("cuda attention: " + std::to_string(splits.count) + " splits of " + std::to_string(splits.span) +
                " positions for " + std::to_string(T) + " tokens (several splits: one token, with partials)");
  if (T * n_heads > (int64_t(1) << 31) - 1) throw Error("cuda attention: " + std::to_string(T) + " tokens x " +
                                                       std::to_string(n_heads) + " heads exceed the grid");
  const float scale = 1.0f / std::sqrt(float(head_dim));
  dispatch_act(act, "attention", [&](auto tag) {
    using Act = decltype(tag);
    const dim3 grid(unsigned(T * n_heads), unsigned(splits.count));
    attention_kernel<Act><<<grid, kAttentionThreads, 0, stream>>>(
        static_cast<const Act*>(key_cache), static_cast<const Act*>(value_cache), static_cast<const Act*>(qkv),
        qkv_stride, pos0, n_heads, n_heads / n_kv_heads, head_dim, kv_dim, scale, splits, static_cast<Act*>(out));
    CHECK_LAST_LAUNCH("attention_kernel");
  });
}

}  // namespace gemlite
