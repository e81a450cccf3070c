// Decode attention of grouped-query heads on tensor cores: one block takes the query heads
// of one kv head (the rows of the mmas), so each key and value row it loads serves all of
// them. attention_kernel (attention.cu) takes one query head a block and so reads a kv head
// `group` times, all but once from L2: Llama-3-8B's 32/8 heads at a 4096-position context
// moved their 16.8 MB at 25 % of the copy (H200), where Llama-2-7B's 32/32 reach 77 %.
// Several heads a block on the CUDA cores were slower still (each round 4x the work;
// runtime/cuda/MEASURED.md): the heads go to the tensor cores instead.
//
// A warp takes kGroupedPositions (16) positions a step, lane = 4 gid + tig:
//   S [16 heads, 16 positions] = Q Kᵀ: two n = 8 tiles of positions (rows base + gid and
//     base + 8 + gid of K, one a lane), HD / 16 mma k-steps each. A lane loads 16 bytes,
//     dimensions 32 c + 8 tig .. + 7, of its key rows for each chunk c; the mma's k order is
//     ours as long as A and B agree, so mma (c, half) takes dimensions 32 c + 8 tig + 4 half
//     + {0, 1} at k 2 tig, + 1 and + {2, 3} at 2 tig + 8, + 9, and q (A, rows gid = the
//     group's heads, rows 8..15 zero) is loaded the same way: no shuffle, no shared memory.
//   softmax per head row, online over the warp's steps (log2 domain; the row's 4 lanes meet
//     by two shuffles);
//   O [16 heads, HD] += P V: P rounded to Act is the A fragment as S's C fragment left it
//     (FlashAttention-2), V the B operand: a lane's 16-byte value loads are 8 x 8 matrices
//     of rows = positions, which movmatrix transposes into B fragments whose n index gid is
//     dimension 32 c + 8 (gid / 2) + 2 u + gid % 2; the C fragment of mma (c, u) then holds
//     dimensions 32 c + 8 tig + 2 u + {0, 1} of head gid, 8 consecutive ones a lane per c.
// The warps' (max, sum, O) meet in shared memory; with several splits each block leaves
// its heads' partials and the last block of the kv head merges them, as attention_kernel.
#include "runtime/cuda/ops.h"

#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/pdl.cuh"
#include "runtime/cuda/act_type.cuh"
#include "runtime/cuda/attention_merge.cuh"

namespace gemlite {
namespace {

constexpr int kGroupedThreads = kGroupedAttentionWarps * 32;

__device__ __forceinline__ void load16(uint32_t (&r)[4], const void* p) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  r[0] = v.x;
  r[1] = v.y;
  r[2] = v.z;
  r[3] = v.w;
}

// The 8 x 8 matrix of 16-bit elements whose row gid, columns 2 tig and 2 tig + 1, lane
// 4 gid + tig holds in x, transposed (sm_75+).
__device__ __forceinline__ uint32_t transpose_8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// RoPE of a lane's pieces of one head row: chunk c's dimensions 32 c + 8 tig + e pair with
// chunk c + C / 2's (rotate-half: i and i + HD / 2); rounded to Act as rope_store_kernel
// stores them.
template <typename Act, int C>
__device__ __forceinline__ void rope_row(float (&x)[C][8], const float (&cos_a)[C / 2][8],
                                         const float (&sin_a)[C / 2][8]) {
#pragma unroll
  for (int c = 0; c < C / 2; ++c)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float a = x[c][e], b = x[c + C / 2][e];
      x[c][e] = to_float(from_float<Act>(a * cos_a[c][e] - b * sin_a[c][e]));
      x[c + C / 2][e] = to_float(from_float<Act>(b * cos_a[c][e] + a * sin_a[c][e]));
    }
}

// grid (n_kv_heads, splits.count), kGroupedThreads a block. Block (kv, s) attends for the
// query heads kv group .. + group - 1 (group: query heads a kv head) to positions
// [s span, (s + 1) span) of the step's span (attention_step_span), as attention_kernel's
// block (head, s) does. key_cache, value_cache [capacity, kv_dim]; qkv [(n_heads + 2 n_kv)
// HD] this step's token (q and k not rotated yet); rope_inv_freq [HD / 2]; out [n_heads, HD].
// PRECOND: T = 1, 1 <= group <= kGroupedMaxGroup, HD 64 or 128, 16-byte aligned rows,
// *pos0 < count x span, count <= kMaxAttentionSplits (checked by launch_attention_grouped).
template <typename Act, int HD>
__global__ void __launch_bounds__(kGroupedThreads, kGroupedBlocksPerSm)
    attention_grouped_kernel(Act* key_cache, Act* value_cache, const Act* qkv, const int* pos0, int group,
                             int kv_dim, float scale_log2, AttentionSplits splits, const float* rope_inv_freq,
                             Act* out) {
  pdl_launch_dependents();  // a PDL successor (the GEMVs) may start now (kernels/pdl.cuh)
  constexpr int C = HD / 32;  // chunks of 32 dimensions: a lane holds 8 of each
  constexpr bool kBf16 = std::is_same<Act, __nv_bfloat16>::value;
  constexpr int kStep = kGroupedPositions * kGroupedAttentionWarps;  // a block's positions a step
  __shared__ float warp_max[kGroupedAttentionWarps][8];     // [warp][head row]
  __shared__ float warp_sum[kGroupedAttentionWarps][8];     // [warp][head row]
  __shared__ float warp_acc[kGroupedAttentionWarps][8][HD];  // [warp][head row][dimension]
  const int kv = int(blockIdx.x), tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int gid = lane / 4, tig = lane % 4;
  const int n_heads = int(gridDim.x) * group, kv_offset = kv * HD, lane_dims = 8 * tig;
  // *pos0 came from the host before the step's first kernel: readable before the wait.
  const int pos = *pos0, n_pos = pos + 1;
  const int span = attention_step_span(splits, n_pos);
  const int begin = int(blockIdx.y) * span, end = min(n_pos, begin + span);
  const int live_splits = min(splits.count, (n_pos + span - 1) / span);
  // Splits past the context leave at once, as attention_kernel's (attention.cu).
  if (int(blockIdx.y) >= live_splits) return;

  // Rows base + gid (t = 0) and base + 8 + gid (t = 1) of keys and values, dimensions
  // 32 c + 8 tig .. + 7; rows outside [lo, hi) keep what they held (zeros at first):
  // finite, and weighed 0.
  uint32_t key[2][C][4] = {}, value[2][C][4] = {};
  const auto load_from = [&](uint32_t (&rows)[2][C][4], const Act* cache, int base, int lo, int hi) {
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int p = base + 8 * t + gid;
      if (p < lo || p >= hi) continue;
      const int64_t row = int64_t(p) * kv_dim + kv_offset + lane_dims;
#pragma unroll
      for (int c = 0; c < C; ++c) load16(rows[t][c], cache + row + 32 * c);
    }
  };
  const auto load_rows = [&](int base, int lo, int hi) {
    load_from(key, key_cache, base, lo, hi);
    load_from(value, value_cache, base, lo, hi);
  };
  const int first = begin + kGroupedPositions * warp;  // this warp's first step
  // Positions before pos were stored by earlier steps: fetched while the kernels before
  // finish, with the rotation's angles.
  load_rows(first, begin, min(end, pos));
  float cos_a[C / 2][8], sin_a[C / 2][8];
#pragma unroll
  for (int c = 0; c < C / 2; ++c)
#pragma unroll
    for (int e = 0; e < 8; ++e) sincosf(float(pos) * rope_inv_freq[32 * c + lane_dims + e], &sin_a[c][e], &cos_a[c][e]);
  pdl_wait();

  // This token's k (rotated) and v -> the cache, by the block whose split holds pos; the
  // barrier makes them visible to its other warps, which read position pos from the cache.
  // holds_pos is the same for the whole block (pos, begin, end are), so every thread or none
  // reaches the barrier.
  const bool holds_pos = pos >= begin && pos < end;
  if (holds_pos) {
    if (warp == 0 && gid == 0) {
      float k[C][8];
      uint4 v[C];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int64_t column = int64_t(n_heads) * HD + kv_offset + 32 * c + lane_dims;
        unpack8<Act>(*reinterpret_cast<const uint4*>(qkv + column), k[c]);
        v[c] = *reinterpret_cast<const uint4*>(qkv + column + kv_dim);
      }
      rope_row<Act, C>(k, cos_a, sin_a);
      const int64_t row = int64_t(pos) * kv_dim + kv_offset + lane_dims;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        *reinterpret_cast<uint4*>(key_cache + row + 32 * c) = pack8<Act>(k[c]);
        *reinterpret_cast<uint4*>(value_cache + row + 32 * c) = v[c];
      }
    }
    __syncthreads();
  }
  load_rows(first, min(end, pos), end);  // position pos, if in this warp's first step

  // q of head kv group + gid, rotated, as the A fragments of the QKᵀ mmas (rows 8..15 are
  // zero: passed as constants): qa[c][half] = {a0, a2}.
  uint32_t qa[C][2][2] = {};
  if (gid < group) {
    float q[C][8];
    const Act* q_row = qkv + int64_t(kv * group + gid) * HD + lane_dims;
#pragma unroll
    for (int c = 0; c < C; ++c) unpack8<Act>(*reinterpret_cast<const uint4*>(q_row + 32 * c), q[c]);
    rope_row<Act, C>(q, cos_a, sin_a);
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        qa[c][half][0] = pack_pair<Act>(q[c][4 * half], q[c][4 * half + 1]);
        qa[c][half][1] = pack_pair<Act>(q[c][4 * half + 2], q[c][4 * half + 3]);
      }
  }

  float row_max = -INFINITY, row_sum = 0;  // head gid over this warp's positions; row_sum this lane's part
  float acc[C][4][2] = {};                 // O [head gid][32 c + 8 tig + 2 u + e], unnormalised
  // The next step's keys are loaded once this step's scores are taken, its values once
  // this step's P V is done: one of the two is always on its way, in the registers that
  // held the other step's.
  for (int base = first; base < end; base += kStep) {
    const int next = base + kStep;
    float score[2][2];  // [t][e]: position base + 8 t + 2 tig + e, log2 units
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      float s[4] = {0, 0, 0, 0};
#pragma unroll
      for (int c = 0; c < C; ++c)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          mma_16816<kBf16>(s, qa[c][half][0], 0u, qa[c][half][1], 0u, key[t][c][2 * half], key[t][c][2 * half + 1]);
#pragma unroll
      for (int e = 0; e < 2; ++e) score[t][e] = base + 8 * t + 2 * tig + e < end ? s[e] * scale_log2 : -INFINITY;
    }
    if (next < end) load_from(key, key_cache, next, begin, end);
    float new_max = fmaxf(row_max, fmaxf(fmaxf(score[0][0], score[0][1]), fmaxf(score[1][0], score[1][1])));
    new_max = fmaxf(new_max, __shfl_xor_sync(0xffffffffu, new_max, 1));
    new_max = fmaxf(new_max, __shfl_xor_sync(0xffffffffu, new_max, 2));
    // Finite: position `base` (< end) is lane tig 0's score[0][0] in every row.
    const float rescale = exp2f(row_max - new_max);  // 0 at the warp's first step
    row_max = new_max;
    float p[2][2];
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int e = 0; e < 2; ++e) p[t][e] = exp2f(score[t][e] - new_max);  // 0 past `end`
    row_sum = row_sum * rescale + (p[0][0] + p[0][1]) + (p[1][0] + p[1][1]);
    const uint32_t pa0 = pack_pair<Act>(p[0][0], p[0][1]), pa2 = pack_pair<Act>(p[1][0], p[1][1]);
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float o[4] = {acc[c][u][0] * rescale, acc[c][u][1] * rescale, 0, 0};
        mma_16816<kBf16>(o, pa0, 0u, pa2, 0u, transpose_8x8(value[0][c][u]), transpose_8x8(value[1][c][u]));
        acc[c][u][0] = o[0];
        acc[c][u][1] = o[1];
      }
    if (next < end) load_from(value, value_cache, next, begin, end);
  }
  row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
  row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 2);

  // The warps' (max, sum, O) -> the block's, a thread an (head, dimension).
  if (tig == 0) {
    warp_max[warp][gid] = row_max;  // -inf for a warp without positions (its sum and O 0)
    warp_sum[warp][gid] = row_sum;
  }
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      warp_acc[warp][gid][32 * c + lane_dims + 2 * u] = acc[c][u][0];
      warp_acc[warp][gid][32 * c + lane_dims + 2 * u + 1] = acc[c][u][1];
    }
  __syncthreads();
  const int items = group * HD;  // (head row, dimension) pairs
  const int stride = HD + 2;
  for (int item = tid; item < items; item += kGroupedThreads) {
    const int r = item / HD, d = item % HD, head = kv * group + r;
    float block_max = -INFINITY;  // finite: warp 0's first step holds position `begin`
#pragma unroll
    for (int w = 0; w < kGroupedAttentionWarps; ++w) block_max = fmaxf(block_max, warp_max[w][r]);
    float block_sum = 0, block_acc = 0;
#pragma unroll
    for (int w = 0; w < kGroupedAttentionWarps; ++w) {
      const float weight = exp2f(warp_max[w][r] - block_max);  // 0 for a warp without positions
      block_sum += weight * warp_sum[w][r];
      block_acc += weight * warp_acc[w][r][d];
    }
    if (live_splits == 1) {
      out[int64_t(head) * HD + d] = from_float<Act>(block_acc / block_sum);
      continue;
    }
    // This split's (acc [hd], max, sum) -> partials [n_heads, count, hd + 2].
    float* mine = splits.partials + (int64_t(head) * splits.count + blockIdx.y) * stride;
    mine[d] = block_acc;
    if (d == 0) {
      mine[HD] = block_max;
      mine[HD + 1] = block_sum;
    }
  }
  if (live_splits == 1) return;
  __threadfence();  // the partials are visible device-wide before the ticket is taken
  __syncthreads();
  __shared__ bool last;
  if (tid == 0) last = atomicAdd(&splits.counters[kv], 1u) == unsigned(live_splits) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  merge_split_partials<Act, kMaxAttentionSplits>(splits, live_splits, kv * group, group, HD, out);
  if (tid == 0) splits.counters[kv] = 0;  // ready for the next launch
}

}  // namespace

void launch_attention_grouped(void* key_cache, void* value_cache, const int* pos0, const void* qkv, int n_heads,
                              int n_kv_heads, int head_dim, const AttentionSplits& splits, void* out, DType act,
                              cudaStream_t stream, const float* rope_inv_freq) {
  if (!attention_grouped_supports(n_heads, n_kv_heads, head_dim))
    throw Error("cuda grouped attention: " + std::to_string(n_heads) + "/" + std::to_string(n_kv_heads) +
                " heads x " + std::to_string(head_dim) + " (need 1.." + std::to_string(kGroupedMaxGroup) +
                " query heads a kv head and heads of 64 or 128 dimensions)");
  if (!rope_inv_freq) throw Error("cuda grouped attention: needs the RoPE frequencies (it rotates q and k itself)");
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned16(key_cache) || !aligned16(value_cache) || !aligned16(qkv))
    throw Error("cuda grouped attention: the KV cache and qkv rows must be 16-byte aligned (16-byte loads)");
  if (splits.count < 1 || splits.count > kMaxAttentionSplits || splits.span < 1 ||
      (splits.count > 1 && (!splits.partials || !splits.counters || reinterpret_cast<uintptr_t>(splits.partials) % 8)))
    throw Error("cuda grouped attention: " + std::to_string(splits.count) + " splits of " +
                std::to_string(splits.span) + " positions (1 to " + std::to_string(kMaxAttentionSplits) +
                " splits; several need counters and 8-byte aligned partials, the merge's loads)");
  const int kv_dim = n_kv_heads * head_dim;
  const float scale_log2 = float(1.4426950408889634 / std::sqrt(double(head_dim)));  // log2(e) / sqrt(hd)
  const dim3 grid(unsigned(n_kv_heads), unsigned(splits.count));
  dispatch_act(act, "grouped attention", [&](auto tag) {
    using Act = decltype(tag);
    const auto launch = [&](auto kernel) {
      launch_pdl("attention_grouped_kernel", kernel, grid, dim3(kGroupedThreads), 0, stream,
                 static_cast<Act*>(key_cache), static_cast<Act*>(value_cache), static_cast<const Act*>(qkv), pos0,
                 n_heads / n_kv_heads, kv_dim, scale_log2, splits, rope_inv_freq, static_cast<Act*>(out));
    };
    if (head_dim == 64)
      launch(attention_grouped_kernel<Act, 64>);
    else
      launch(attention_grouped_kernel<Act, 128>);
  });
}

}  // namespace gemlite
