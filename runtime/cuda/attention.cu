// RoPE + KV store, and causal grouped-query attention over the KV cache (fp16 or bf16),
// one block per (head, token, split) for decode and chunks shorter than
// PrefillAttention::min_tokens (decode of grouped-query heads of 64 or 128 dimensions takes
// attention_grouped.cu instead, see attention_runs_grouped), fp32 math like
// runtime/cpu/cpu_backend.cpp. The context can be thousands of positions, so they go
// through with an online softmax (running max and sum, the accumulator rescaled as the max
// grows): nothing per position is kept.
#include "runtime/cuda/ops.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/pdl.cuh"
#include "runtime/cuda/act_type.cuh"
#include "runtime/cuda/attention_merge.cuh"

namespace gemlite {
namespace {

// RoPE on q (in place) and k, and the rotated k and v -> the cache at positions *pos0 + t:
// one launch where rope + two copies were three. A kernel, not a memcpy at a
// host-computed offset, so the position can change between graph replays.
// Items of work: pair j < pairs (i = j % half of head j / half: heads [0, n_heads) of q,
// then [0, n_kv) of k), then element j - pairs of v. Block (t, y) takes kRopeItems *
// blockDim.x consecutive items of token t, a thread every blockDim.x-th, all its loads
// before its first store: the compiler may not hoist a load above a store that could
// alias it, and a single block looping over 4096 pairs, each iteration waiting on its
// loads, took 11.9 us a layer at Llama-2-7B decode (ncu, H100). The token's cos and sin
// (half of each) are computed once a block into shared memory, before the PDL wait: a
// sincosf per pair took 21.7 us for a 512-token chunk of Llama-2-7B (H200, ncu).
// PRECOND: grid (T, ceil((pairs + kv_dim) / (kRopeItems blockDim.x))), dynamic shared
// memory head_dim floats.
constexpr int kRopeItems = 4;
template <typename Act>
__global__ void rope_store_kernel(Act* qkv, int64_t qkv_stride, Act* key_cache, Act* value_cache, const int* pos0,
                                  const float* inv_freq, int n_heads, int n_kv_heads, int head_dim) {
  extern __shared__ float angles[];  // [2][half]: cos, then sin
  pdl_launch_dependents();  // a PDL successor (the GEMVs) may start now (kernels/pdl.cuh)
  const int64_t t = blockIdx.x;
  // *pos0 came from the host before the step's first kernel: readable before the wait.
  const int pos = *pos0 + int(t), half = head_dim / 2, q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
  for (int i = int(threadIdx.x); i < half; i += int(blockDim.x))
    sincosf(float(pos) * inv_freq[i], &angles[half + i], &angles[i]);  // fp32 like the CPU and Hugging Face
  __syncthreads();
  pdl_wait();
  Act* row = qkv + t * qkv_stride;  // [q_dim + 2 kv_dim]: q, k, v
  const int pairs = (n_heads + n_kv_heads) * half;
  const int first = int(blockIdx.y * blockDim.x) * kRopeItems + int(threadIdx.x);
  float a[kRopeItems], b[kRopeItems];
#pragma unroll
  for (int u = 0; u < kRopeItems; ++u) {
    const int j = first + u * int(blockDim.x);
    if (j < pairs) {
      const Act* x = row + (j / half) * head_dim;  // [hd] q heads, then k heads
      a[u] = to_float(x[j % half]);
      b[u] = to_float(x[j % half + half]);
    } else if (j < pairs + kv_dim) {
      a[u] = to_float(row[q_dim + kv_dim + (j - pairs)]);
    }
  }
#pragma unroll
  for (int u = 0; u < kRopeItems; ++u) {
    const int j = first + u * int(blockDim.x);
    if (j < pairs) {
      const int head = j / half, i = j % half;
      const float cos_a = angles[i], sin_a = angles[half + i];
      const Act rotated_a = from_float<Act>(a[u] * cos_a - b[u] * sin_a);
      const Act rotated_b = from_float<Act>(b[u] * cos_a + a[u] * sin_a);
      Act* x = head < n_heads ? row + head * head_dim  // [hd] q in place, k into the cache
                              : key_cache + int64_t(pos) * kv_dim + (head - n_heads) * head_dim;
      x[i] = rotated_a;
      x[i + half] = rotated_b;
    } else if (j < pairs + kv_dim) {
      value_cache[int64_t(pos) * kv_dim + (j - pairs)] = from_float<Act>(a[u]);
    }
  }
}

// grid.x = T * n_heads (block b: head b % n_heads of token b / n_heads; on x, whose limit
// is 2^31 - 1, not on y with its 65535), grid.y = splits.count, blockDim.x = kAttentionThreads.
// With several splits (decode, AttentionSplits), block (b, s) attends to positions
// [s * span, (s + 1) * span) only, span being the step's (attention_step_span), and leaves
// its (acc [hd], max in log2 units, sum) in splits.partials; the last block of b to finish
// (a ticket from splits.counters) merges
// them into out and resets the counter, so no second launch is needed and graph replays
// find it at zero.
//
// A group of `lanes` threads (hd / 8 rounded up to a power of two) takes kPositionsPerGroup
// positions per round, each thread 8 dimensions (one 16-byte load of the key and of the
// value row); the group's score is a shuffle sum. Each group keeps its own online softmax
// (max, sum, acc [8] per thread) over its positions, so the loop has no block-wide
// reduction; the groups meet once at the end, by shuffles inside each warp and then in
// shared memory. Against the kernel this replaced (a whole key row per thread, values one
// dimension a thread: 7.9 us a layer at Llama-2-7B decode, ncu on the H100) llama2-7b q4g64
// tg128 went 347.4 -> 368.4 tok/s. The rounds are bound by latency more than by issue (ncu,
// H200, ctx 4096: ~160 instructions per position and lane, 8.2 cycles between a warp's
// instructions at 16 warps an SM); runtime/cuda/MEASURED.md has each step.
// PRECOND: head_dim % 8 == 0, head_dim <= kMaxAttentionHeadDim; q, caches 16-byte aligned
// rows (checked by launch_attention).
static_assert(kMaxAttentionHeadDim <= kAttentionThreads && kMaxAttentionHeadDim <= 8 * 32,
              "threads tid < head_dim write one split's output; a group of at most 32 lanes covers a row");
// cos and sin of the rotation of this thread's 8 dimensions 8 piece .. 8 piece + 7 of a
// head row at position pos: the same for q and k, and known before the PDL wait (pos comes
// from the host, inv_freq from the load), so they are computed while the kernel before
// still runs. Pieces past the row (piece >= pieces) get the identity.
struct RopeAngles {
  float cos[8], sin[8];
};
__device__ __forceinline__ RopeAngles rope_angles(int piece, int pieces, int pos, const float* inv_freq) {
  const int half_pieces = pieces / 2;
  const bool first = piece < half_pieces;
  RopeAngles a;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    a.cos[e] = 1.0f;
    a.sin[e] = 0.0f;
    if (piece >= pieces) continue;
    const int i = 8 * (first ? piece : piece - half_pieces) + e;  // pair index in [0, hd/2)
    sincosf(float(pos) * inv_freq[i], &a.sin[e], &a.cos[e]);
  }
  return a;
}

// RoPE of the 8 dimensions 8 piece .. 8 piece + 7 of a head row held by this thread, the
// other element of each rotate-half pair (i, i + hd/2) coming from the lane that holds it
// (piece +- pieces/2 of the same group). Rounded to Act as rope_store_kernel stores it, with
// its fp32 arithmetic. PRECOND: head_dim % 16 == 0; called by all threads of the warp.
template <typename Act>
__device__ __forceinline__ void rope_piece(float (&x)[8], int piece, int pieces, const RopeAngles& angles) {
  const int half_pieces = pieces / 2;
  const bool first = piece < half_pieces;
  const int lane = threadIdx.x % 32;
  const int partner = piece < pieces ? (first ? lane + half_pieces : lane - half_pieces) : lane;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float other = __shfl_sync(0xffffffffu, x[e], partner);
    if (piece >= pieces) continue;
    const float a = first ? x[e] : other, b = first ? other : x[e];
    const float cos_a = angles.cos[e], sin_a = angles.sin[e];
    x[e] = to_float(from_float<Act>(first ? a * cos_a - b * sin_a : b * cos_a + a * sin_a));
  }
}

// The sum of x over a group of `lanes` lanes (a power of two up to 32, the same for the
// whole warp). Unrolled under a warp-uniform guard: as a loop over lanes, each step cost
// a shift, a compare and a branch beside its shuffle and add (the SASS of the fp16 kernel).
__device__ __forceinline__ float group_sum(float x, int lanes) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    if (offset < lanes) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <typename Act>
__global__ void __launch_bounds__(kAttentionThreads, kAttentionBlocksPerSm)
    attention_kernel(Act* key_cache, Act* value_cache, const Act* q, int64_t q_stride, const int* pos0,
                     int n_heads, int group, int head_dim, int kv_dim, float scale_log2, AttentionSplits splits,
                     const float* rope_inv_freq, Act* out) {
  pdl_launch_dependents();  // a PDL successor (the GEMVs) may start now (kernels/pdl.cuh)
  constexpr int kWarps = kAttentionThreads / 32;
  __shared__ float warp_max[kWarps];                         // [warps]
  __shared__ float warp_sum[kWarps];                         // [warps]
  __shared__ float warp_acc[kWarps * kMaxAttentionHeadDim];  // [warps, hd]
  const int h = int(blockIdx.x % unsigned(n_heads)), t = int(blockIdx.x / unsigned(n_heads)), tid = threadIdx.x;
  // *pos0 came from the host before the step's first kernel: readable before the wait.
  const int pos = *pos0 + t, n_pos = pos + 1;  // causal: positions [0, pos0 + t]
  const int span = attention_step_span(splits, n_pos);  // the same for every block of the step
  const int begin = int(blockIdx.y) * span, end = min(n_pos, begin + span);  // this block's
  // Splits that hold a position (T = 1 whenever count > 1, so the same for every block):
  // the others leave at once (below), and one that holds them all writes out directly. At the
  // start of the context this skips the partials, the fence, the ticket and the merge, and
  // frees the SMs of the empty splits; it did not show in decode speed (llama2-7b tg128 at
  // depth 0, same-machine A/B: q4g64 451.0 -> 449.2 / 451.9 tok/s, q8 344.0 -> 345.0).
  const int live_splits = min(splits.count, (n_pos + span - 1) / span);
  // With rope_inv_freq (T = 1), this token's k and v come from qkv, not the cache.
  const bool fused_rope = rope_inv_freq != nullptr;
  const int cached_end = fused_rope ? min(end, pos) : end;  // positions read from the cache
  const int earlier_end = min(cached_end, *pos0);            // those written by earlier steps
  const int kv_offset = (h / group) * head_dim;
  const int64_t row = (int64_t(t) * n_heads + h) * head_dim;  // this head in out [T, n_heads*hd]

  const int pieces = head_dim / 8;  // 16-byte pieces of a row
  int lanes = 1;
  while (lanes < pieces) lanes *= 2;
  const int slot = tid / lanes, piece = tid % lanes, n_slots = blockDim.x / lanes;
  const bool active = piece < pieces;  // threads past the row (hd / 8 not a power of two) idle
  const Act* keys = key_cache + kv_offset + 8 * piece;      // + p * kv_dim: position p's piece
  const Act* values = value_cache + kv_offset + 8 * piece;  // + p * kv_dim

  // Round `base`'s keys and values at positions [lo, hi) (others left as they are).
  uint4 k[kPositionsPerGroup], v[kPositionsPerGroup];
  const auto load_round = [&](int base, int lo, int hi) {
#pragma unroll
    for (int u = 0; u < kPositionsPerGroup; ++u) {
      const int p = base + u * n_slots + slot;
      if (active && p >= lo && p < hi) {
        k[u] = *reinterpret_cast<const uint4*>(keys + int64_t(p) * kv_dim);
        v[u] = *reinterpret_cast<const uint4*>(values + int64_t(p) * kv_dim);
      }
    }
  };
#pragma unroll
  for (int u = 0; u < kPositionsPerGroup; ++u) k[u] = v[u] = make_uint4(0, 0, 0, 0);
  // The first round's positions of earlier steps do not depend on the kernels before:
  // fetched while they finish, and the rotation's cos and sin computed (with an L2 prefetch
  // of the later rounds, since dropped, this took llama2-7b q4g64 tg128 447.3 -> 461.9 tok/s).
  // Nothing more is fetched ahead: an L2 prefetch of the whole span flooded the L2 at depth
  // (without it ctx 4096 26.4 -> 21.9 us, H200), two rounds ahead measured in between, and
  // the next projection's weights pulled into L2 here did not speed up the GEMV after
  // attention (runtime/cuda/MEASURED.md, kernels/qn/MEASURED.md).
  // Splits past the context leave at once, without the wait: split 0 always holds a
  // position and waits, so the grid still ends after its predecessor (kernels/pdl.cuh's
  // rule asks it of every block only so that no grid can end before its predecessor), and
  // their SMs are free for the GEMVs around this kernel at once.
  const bool live = int(blockIdx.y) < live_splits;
  if (!live) return;
  load_round(begin, begin, earlier_end);
  const RopeAngles angles = fused_rope ? rope_angles(piece, pieces, pos, rope_inv_freq) : RopeAngles{};
  pdl_wait();
  load_round(begin, earlier_end, cached_end);

  float query[8] = {};  // this thread's dimensions of q, times the softmax scale and log2(e)
  if (active) unpack8<Act>(*reinterpret_cast<const uint4*>(q + t * q_stride + h * head_dim + 8 * piece), query);
  float key_now[8] = {}, value_now[8] = {};  // fused_rope: this token's k (rotated) and v
  if (fused_rope) {
    const Act* kv_row = q + int64_t(n_heads) * head_dim + kv_offset + 8 * piece;  // this token's k piece
    uint4 key_bits = make_uint4(0, 0, 0, 0), value_bits = key_bits;
    if (active) {
      key_bits = *reinterpret_cast<const uint4*>(kv_row);
      value_bits = *reinterpret_cast<const uint4*>(kv_row + kv_dim);
      unpack8<Act>(key_bits, key_now);
      unpack8<Act>(value_bits, value_now);
    }
    rope_piece<Act>(query, piece, pieces, angles);
    rope_piece<Act>(key_now, piece, pieces, angles);
    // The first q head of a kv head stores the token's k and v, in the split that holds pos.
    if (h % group == 0 && pos >= begin && pos < end && slot == 0 && active) {
      Act rotated[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) rotated[i] = from_float<Act>(key_now[i]);
      *reinterpret_cast<uint4*>(key_cache + int64_t(pos) * kv_dim + kv_offset + 8 * piece) =
          *reinterpret_cast<const uint4*>(rotated);
      *reinterpret_cast<uint4*>(value_cache + int64_t(pos) * kv_dim + kv_offset + 8 * piece) = value_bits;
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) query[i] *= scale_log2;

  // This token's score, before the rounds: the compiler can then schedule its group_sum
  // beside theirs rather than after the loop.
  const bool holds_now = fused_rope && pos >= begin && pos < end;
  float score_now = 0;
  if (holds_now) {
#pragma unroll
    for (int i = 0; i < 8; ++i) score_now += query[i] * key_now[i];
    score_now = group_sum(score_now, lanes);
  }
  float running_max = -INFINITY, running_sum = 0, acc[8] = {};
  // Rounds are the same for every thread (shuffles need the whole warp): a position past
  // `cached_end` scores -inf and weighs 0.
  for (int base = begin; base < cached_end; base += kPositionsPerGroup * n_slots) {
    // Positions past cached_end keep an earlier round's key and value (or the first
    // round's zeros): finite, and weighed 0.
    if (base != begin) load_round(base, base, cached_end);
    float score[kPositionsPerGroup];
    float new_max = running_max;
#pragma unroll
    for (int u = 0; u < kPositionsPerGroup; ++u) {
      float key[8];
      unpack8<Act>(k[u], key);
      float dot = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) dot += query[i] * key[i];
      dot = group_sum(dot, lanes);
      score[u] = base + u * n_slots + slot < cached_end ? dot : -INFINITY;
      new_max = fmaxf(new_max, score[u]);
    }
    if (new_max == -INFINITY) continue;  // no position of this group yet
    const float rescale = exp2f(running_max - new_max);  // 0 on the group's first position
    running_sum *= rescale;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] *= rescale;
#pragma unroll
    for (int u = 0; u < kPositionsPerGroup; ++u) {
      const float w = exp2f(score[u] - new_max);  // 2^-inf = 0 past `cached_end`
      float value[8];
      unpack8<Act>(v[u], value);
      running_sum += w;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += w * value[i];
    }
    running_max = new_max;
  }
  if (holds_now) {  // this token's position, from registers, in slot 0
    const float dot = score_now;
    if (slot == 0) {
      const float new_max = fmaxf(running_max, dot);
      const float rescale = exp2f(running_max - new_max), w = exp2f(dot - new_max);
      running_sum = running_sum * rescale + w;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = acc[i] * rescale + w * value_now[i];
      running_max = new_max;
    }
  }

  // The groups' (max, sum, acc) -> the block's, relative to the block's max: first the
  // groups of a warp by shuffles (lane l and lane l ^ offset hold the same piece of two
  // groups), then the warps in shared memory. Each group's max, sum and acc written to
  // shared memory and merged by a loop over all of them (16 at head_dim 128) had cost ~2 %
  // of a llama2-7b q4g64 token at tg128 (H100: 475 -> 482-487 tok/s with that merge left
  // out; 106 registers now, no spills).
  for (int offset = lanes; offset < 32; offset *= 2) {
    const float other_max = __shfl_xor_sync(0xffffffffu, running_max, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, running_sum, offset);
    float other_acc[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) other_acc[i] = __shfl_xor_sync(0xffffffffu, acc[i], offset);
    const float new_max = fmaxf(running_max, other_max);
    if (new_max == -INFINITY) continue;  // neither group holds a position
    const float w = exp2f(running_max - new_max), w_other = exp2f(other_max - new_max);  // 2^-inf = 0
    running_sum = running_sum * w + other_sum * w_other;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = acc[i] * w + other_acc[i] * w_other;
    running_max = new_max;
  }
  const int warp = tid / 32, lane = tid % 32;
  if (lane == 0) {
    warp_max[warp] = running_max;
    warp_sum[warp] = running_sum;
  }
  if (lane < lanes && active) {
#pragma unroll
    for (int i = 0; i < 8; ++i) warp_acc[warp * head_dim + 8 * piece + i] = acc[i];
  }
  __syncthreads();
  float block_max = -INFINITY;  // finite, a live split holding a position; the check below is defensive
#pragma unroll
  for (int w = 0; w < kWarps; ++w) block_max = fmaxf(block_max, warp_max[w]);
  float block_sum = 0, block_acc = 0;  // block_acc: dimension tid
  if (block_max != -INFINITY) {
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = exp2f(warp_max[w] - block_max);  // 0 for a warp without positions
      block_sum += weight * warp_sum[w];
      if (tid < head_dim) block_acc += weight * warp_acc[w * head_dim + tid];
    }
  }
  if (live_splits == 1) {
    if (tid < head_dim) out[row + tid] = from_float<Act>(block_acc / block_sum);
    return;
  }
  // This split's (acc [hd], max, sum) -> partials [T * n_heads, count, hd + 2], merged by
  // the last of the live splits to finish.
  const int stride = head_dim + 2;
  float* mine = splits.partials + (int64_t(blockIdx.x) * splits.count + blockIdx.y) * stride;
  if (tid < head_dim) mine[tid] = block_acc;
  if (tid == 0) {
    mine[head_dim] = block_max;
    mine[head_dim + 1] = block_sum;
  }
  __threadfence();  // the partial is visible device-wide before the ticket is taken
  __syncthreads();
  __shared__ bool last;
  if (tid == 0) last = atomicAdd(&splits.counters[blockIdx.x], 1u) == unsigned(live_splits) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  merge_split_partials<Act, 8>(splits, live_splits, int(blockIdx.x), 1, head_dim, out);
  if (tid == 0) splits.counters[blockIdx.x] = 0;  // ready for the next launch
}

}  // namespace

void launch_rope_store(void* key_cache, void* value_cache, const int* pos0, const float* inv_freq, void* qkv,
                       int64_t T, int n_heads, int n_kv_heads, int head_dim, DType act, cudaStream_t stream) {
  if (head_dim < 2 || head_dim % 2 != 0)
    throw Error("cuda rope: head_dim " + std::to_string(head_dim) + " (need an even head_dim)");
  const int kv_dim = n_kv_heads * head_dim;
  const int64_t qkv_stride = int64_t(n_heads + 2 * n_kv_heads) * head_dim;
  constexpr int kRopeThreads = 128;
  const int64_t items = int64_t(n_heads + n_kv_heads) * (head_dim / 2) + kv_dim;  // per token
  const dim3 rope_grid(unsigned(T), unsigned((items + kRopeThreads * kRopeItems - 1) / (kRopeThreads * kRopeItems)));
  dispatch_act(act, "rope", [&](auto tag) {
    using Act = decltype(tag);
    launch_pdl("rope_store_kernel", rope_store_kernel<Act>, rope_grid, dim3(kRopeThreads),
               size_t(head_dim) * sizeof(float), stream, static_cast<Act*>(qkv), qkv_stride,
               static_cast<Act*>(key_cache), static_cast<Act*>(value_cache), pos0, inv_freq, n_heads, n_kv_heads,
               head_dim);
  });
}

void launch_attention(void* key_cache, void* value_cache, const int* pos0, const void* qkv, int64_t T,
                      int n_heads, int n_kv_heads, int head_dim, const AttentionSplits& splits, void* out, DType act,
                      cudaStream_t stream, const float* rope_inv_freq) {
  if (rope_inv_freq && (T != 1 || !attention_fuses_rope(head_dim)))
    throw Error("cuda attention: RoPE inside attention needs one token and heads of a multiple of 16 dimensions (" +
                std::to_string(T) + " tokens, " + std::to_string(head_dim) + " dimensions)");
  if (!attention_supports_head_dim(head_dim) || n_kv_heads < 1 ||
      n_heads % n_kv_heads != 0)
    throw Error("cuda attention: head_dim " + std::to_string(head_dim) + " with " + std::to_string(n_heads) +
                " heads / " + std::to_string(n_kv_heads) + " kv heads (need head_dim a multiple of 8 up to " +
                std::to_string(kMaxAttentionHeadDim) + ", and n_heads a multiple of n_kv_heads)");
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned16(key_cache) || !aligned16(value_cache) || !aligned16(qkv))
    throw Error("cuda attention: the KV cache and qkv rows must be 16-byte aligned (16-byte loads)");
  const int kv_dim = n_kv_heads * head_dim;
  const int64_t qkv_stride = int64_t(n_heads + 2 * n_kv_heads) * head_dim;
  if (splits.count < 1 || splits.count > kMaxAttentionSplits || splits.span < 1 ||
      (splits.count > 1 &&
       (T != 1 || !splits.partials || !splits.counters || reinterpret_cast<uintptr_t>(splits.partials) % 8)))
    throw Error("cuda attention: " + std::to_string(splits.count) + " splits of " + std::to_string(splits.span) +
                " positions for " + std::to_string(T) + " tokens (1 to " + std::to_string(kMaxAttentionSplits) +
                " splits; several: one token, counters and 8-byte aligned partials, the merge's loads)");
  if (T * n_heads > (int64_t(1) << 31) - 1) throw Error("cuda attention: " + std::to_string(T) + " tokens x " +
                                                       std::to_string(n_heads) + " heads exceed the grid");
  // Scores in log2 units (exp2 is one MUFU.EX2 where expf was ~8 instructions), as the
  // CPU's exp(s - max) = 2^((s - max) log2 e).
  const float scale_log2 = float(1.4426950408889634 / std::sqrt(double(head_dim)));  // log2(e) / sqrt(hd)
  dispatch_act(act, "attention", [&](auto tag) {
    using Act = decltype(tag);
    const dim3 grid(unsigned(T * n_heads), unsigned(splits.count));
    launch_pdl("attention_kernel", attention_kernel<Act>, grid, dim3(kAttentionThreads), 0, stream,
               static_cast<Act*>(key_cache), static_cast<Act*>(value_cache), static_cast<const Act*>(qkv),
               qkv_stride, pos0, n_heads, n_heads / n_kv_heads, head_dim, kv_dim, scale_log2, splits, rope_inv_freq,
               static_cast<Act*>(out));
  });
}

}  // namespace gemlite
