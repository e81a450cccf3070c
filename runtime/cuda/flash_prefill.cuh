#pragma once
// Causal grouped-query attention of a prompt chunk in one kernel (FlashAttention-2's
// forward: scores never leave registers), for heads of 64 or 128 dimensions. Included by
// runtime/cuda/prefill_attention.cu only.
//
// Block (query tile, heads): 64 query rows, 4 warps of 16 each, of heads_a_tile query heads
// (1, or a kv head's group: kGroupHeadsFromPosition in flash_prefill_launch.h has the rule
// and its measurements). Row R of a block's T x heads_a_tile rows is token R / heads_a_tile
// of query head blockIdx.y x heads_a_tile + R % heads_a_tile: with the group's heads, a
// chunk of 16 tokens and 4 query heads a kv head fills a tile of 64 rows where one head
// filled 16, and the heads share each K and V tile the block copies. It walks the key tiles
// (64 positions) from 0 to the tile's last causal position, K and V of the next tile copied
// by cp.async into a second buffer while this one is used:
//   S [16, 64] = Q Kᵀ (mma m16n8k16, fp32; Q's A fragments loaded once, K's B fragments by
//   ldmatrix), masked past each query's position, scaled into the log2 domain;
//   a running max and sum per query row (the row's 4 lanes combine by shuffles), O and the
//   sum rescaled when the max grows;
//   O [16, hd] += P V, P rounded to Act as the A fragments of the second mma (the C
//   fragment of S is the A fragment layout), V's B fragments by ldmatrix.trans.
// O / sum is written as Act. Shared memory rows are padded by 8 elements (16 bytes), so
// ldmatrix's 8 rows fall in 8 different bank groups.
// Split over the keys (grid.z) when the query tiles alone are too few blocks: a 32-token
// chunk at position 4096 with 32 heads is 32 blocks of 65 key tiles each, and ran 19 %
// slower a token than the cuBLAS GEMMs (llama2-7b q4g64 pp32 @ d4096, H100). Each split
// then writes its unnormalised O, max and sum in fp32, and flash_merge_kernel combines them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/device_util.cuh"
#include "runtime/cuda/act_type.cuh"
#include "runtime/cuda/flash_prefill_launch.h"

namespace gemlite {
namespace {

constexpr int kFlashThreads = 128;  // 4 warps of 16 query rows (kFlashQueries: flash_prefill_launch.h)
static_assert(kFlashQueries == kFlashKeys, "the Q tile takes the shared memory of a K tile (FlashLayout)");

template <int HD>
struct FlashLayout {
  static constexpr int kRow = HD + 8;                           // elements a shared-memory row
  static constexpr int kTileElements = kFlashKeys * kRow;       // one K or V tile (= a Q tile)
  static constexpr int kSmemBytes = (1 + 4) * kTileElements * int(sizeof(uint16_t));  // Q, then K and V twice
};

__device__ __forceinline__ void ldmatrix_x4(const void* smem, uint32_t (&r)[4]) {
  const uint32_t address = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(const void* smem, uint32_t (&r)[4]) {
  const uint32_t address = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// PRECOND: blockDim.x = kFlashThreads, dynamic shared memory FlashLayout<HD>::kSmemBytes,
// grid (ceil(T heads_a_tile / kFlashQueries), n_heads / heads_a_tile, splits), heads_a_tile
// dividing group (the query heads of a kv head); q in qkv [T, qkv_stride] (head h at
// column h HD, rotated), the caches [>= pos0 + T, kv_dim] holding positions
// [0, pos0 + T); rows and caches 16-byte aligned (qkv_stride and kv_dim multiples of 8).
// Split z takes the key tiles [z tiles_per_split, (z + 1) tiles_per_split); with one split
// (tiles_per_split >= the key tiles) it writes out [T, out_stride], else
// partials [splits][T][n_heads][HD + 2] (O unnormalised, then the row's max in the log2
// domain and its sum; max -inf where the split held no key of the row, O then unwritten
// or zero). The partials' layout differs from decode's (attention.cu: [head][split], max
// in the natural log): this one is written a query tile at a time.
template <typename Act, int HD>
__global__ void __launch_bounds__(kFlashThreads)
    flash_prefill_kernel(const Act* qkv, int64_t qkv_stride, const Act* key_cache, const Act* value_cache, int kv_dim,
                         int group, int heads_a_tile, int pos0, int T, float scale_log2, int tiles_per_split,
                         Act* out, int out_stride, float* partials) {
  static_assert(HD % 16 == 0, "whole mma k-steps of 16 along the head");
  using L = FlashLayout<HD>;
  constexpr bool kBf16 = std::is_same<Act, __nv_bfloat16>::value;  // the mma's input type
  extern __shared__ uint4 smem_raw[];
  Act* sq = reinterpret_cast<Act*>(smem_raw);  // [64][kRow]
  Act* sk = sq + L::kTileElements;             // [2][64][kRow]
  Act* sv = sk + 2 * L::kTileElements;         // [2][64][kRow]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
  // The longest tiles (the last queries) first: the grid's tail is then the short ones.
  const int q_tile = int(gridDim.x - 1 - blockIdx.x), first_head = int(blockIdx.y) * heads_a_tile;
  const int n_heads = int(gridDim.y) * heads_a_tile, rows = T * heads_a_tile;  // rows of this block's heads
  const int r0 = q_tile * kFlashQueries;                                       // the tile's first row
  const int n_keys = pos0 + (min(rows, r0 + kFlashQueries) - 1) / heads_a_tile + 1;  // positions its last row sees
  const int first_tile = int(blockIdx.z) * tiles_per_split;
  const int end_tile = min((n_keys + kFlashKeys - 1) / kFlashKeys, first_tile + tiles_per_split);
  // Row r (< rows) -> its token and query head.
  const auto token_of = [&](int r) { return r / heads_a_tile; };
  const auto head_of = [&](int r) { return first_head + r % heads_a_tile; };
  const auto partial_row = [&](int r) {  // [HD + 2] of row r's token and head, this split
    return partials + ((int64_t(blockIdx.z) * T + token_of(r)) * n_heads + head_of(r)) * (HD + 2);
  };
  const Act* keys = key_cache + (first_head / group) * HD;  // [position][kv_dim], the kv head's columns
  const Act* values = value_cache + (first_head / group) * HD;

  constexpr int kChunks = HD / 8;  // 16-byte pieces a row
  const auto copy_tile = [&](Act* dst, const Act* src, int64_t stride, int first_row, int n_rows) {
    for (int c = int(threadIdx.x); c < kFlashKeys * kChunks; c += kFlashThreads) {
      const int r = c / kChunks, piece = c % kChunks;
      const bool valid = first_row + r < n_rows;
      cp_async16_or_zero(dst + r * L::kRow + piece * 8, src + int64_t(valid ? first_row + r : 0) * stride + piece * 8,
                     valid);
    }
  };
  // A split past this query tile's last key: no key of any row. (Were this kernel ever
  // launched with PDL, pdl_wait would have to come before these writes: kernels/pdl.cuh.)
  if (first_tile >= end_tile) {
    for (int r = r0 + int(threadIdx.x); r < min(rows, r0 + kFlashQueries); r += kFlashThreads)
      partial_row(r)[HD] = -INFINITY;
    return;
  }
  // The Q tile: row r of the tile from token and head of row r0 + r (zeros past the rows).
  for (int c = int(threadIdx.x); c < kFlashQueries * kChunks; c += kFlashThreads) {
    const int r = c / kChunks, piece = c % kChunks, row = r0 + r;
    const bool valid = row < rows;
    const Act* src = qkv + (valid ? int64_t(token_of(row)) * qkv_stride + head_of(row) * HD : 0) + piece * 8;
    cp_async16_or_zero(sq + r * L::kRow + piece * 8, src, valid);
  }
  copy_tile(sk, keys, kv_dim, first_tile * kFlashKeys, n_keys);
  copy_tile(sv, values, kv_dim, first_tile * kFlashKeys, n_keys);
  cp_async_commit();

  uint32_t qa[HD / 16][4];      // Q's A fragments, [k-step][register]
  float o[HD / 8][4] = {};      // O's C fragments, [hd n-block][register]
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};  // rows gid, gid + 8
  const int warp_row = r0 + warp * 16;  // the warp's first row
  const int q_pos[2] = {pos0 + token_of(warp_row + gid), pos0 + token_of(warp_row + gid + 8)};  // rows gid, gid + 8

  for (int kt = first_tile; kt < end_tile; ++kt) {
    const int buffer = (kt - first_tile) % 2;
    if (kt + 1 < end_tile) {
      copy_tile(sk + (1 - buffer) * L::kTileElements, keys, kv_dim, (kt + 1) * kFlashKeys, n_keys);
      copy_tile(sv + (1 - buffer) * L::kTileElements, values, kv_dim, (kt + 1) * kFlashKeys, n_keys);
    }
    cp_async_commit();
    cp_async_wait<1>();  // everything but the tile just asked for
    __syncthreads();
    if (kt == first_tile) {
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks)
        ldmatrix_x4(sq + (warp * 16 + lane % 16) * L::kRow + ks * 16 + (lane / 16) * 8, qa[ks]);
    }
    const Act* k_tile = sk + buffer * L::kTileElements;
    const Act* v_tile = sv + buffer * L::kTileElements;

    // S = Q Kᵀ: 8 n-blocks of 8 keys; ldmatrix x4 gives two n-blocks' (b0, b1) of a k-step.
    float s[kFlashKeys / 8][4] = {};
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks)
#pragma unroll
      for (int j = 0; j < kFlashKeys / 8; j += 2) {
        uint32_t b[4];
        const int m = lane / 8;
        ldmatrix_x4(k_tile + (8 * (j + m / 2) + lane % 8) * L::kRow + ks * 16 + (m % 2) * 8, b);
        mma_16816<kBf16>(s[j], qa[ks], b[0], b[1]);
        mma_16816<kBf16>(s[j + 1], qa[ks], b[2], b[3]);
      }

    // Scale into the log2 domain; mask keys past each row's position. Keys past n_keys
    // (zero-filled) lie past every stored row's position, so the same test masks them;
    // only rows past T x heads_a_tile, never stored, see them.
    const int key0 = kt * kFlashKeys;
    const bool diagonal = key0 + kFlashKeys - 1 > pos0 + token_of(warp_row);
#pragma unroll
    for (int j = 0; j < kFlashKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + 8 * j + 2 * tig + (e % 2);
        s[j][e] = diagonal && key > q_pos[e / 2] ? -INFINITY : s[j][e] * scale_log2;
      }

    // The running max and sum of rows gid (r = 0) and gid + 8 (r = 1).
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kFlashKeys / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float new_max = fmaxf(row_max[r], tile_max);
      // A row with no key yet (every key of its split's tiles so far masked) keeps max -inf:
      // nothing to rescale.
      const float base = new_max == -INFINITY ? 0.0f : new_max;
      correction[r] = exp2f(row_max[r] - base);
      row_max[r] = new_max;
      float tile_sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kFlashKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          s[j][2 * r + e] = exp2f(s[j][2 * r + e] - base);
          tile_sum += s[j][2 * r + e];
        }
      tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
      tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 2);
      row_sum[r] = row_sum[r] * correction[r] + tile_sum;
    }
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      o[n][0] *= correction[0];
      o[n][1] *= correction[0];
      o[n][2] *= correction[1];
      o[n][3] *= correction[1];
    }

    // O += P V: k-step ks covers keys 16 ks .. + 15, S's n-blocks 2 ks and 2 ks + 1.
#pragma unroll
    for (int ks = 0; ks < kFlashKeys / 16; ++ks) {
      const uint32_t pa[4] = {pack_pair<Act>(s[2 * ks][0], s[2 * ks][1]), pack_pair<Act>(s[2 * ks][2], s[2 * ks][3]),
                              pack_pair<Act>(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                              pack_pair<Act>(s[2 * ks + 1][2], s[2 * ks + 1][3])};
#pragma unroll
      for (int n = 0; n < HD / 8; n += 2) {
        uint32_t b[4];
        const int m = lane / 8;
        ldmatrix_x4_trans(v_tile + (16 * ks + (m % 2) * 8 + lane % 8) * L::kRow + 8 * (n + m / 2), b);
        mma_16816<kBf16>(o[n], pa, b[0], b[1]);
        mma_16816<kBf16>(o[n + 1], pa, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }

  // out [t, h HD + col] = O / sum, or the split's partial row; rows past T x heads_a_tile not stored.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int q_row = warp_row + gid + 8 * r;
    if (q_row >= rows) continue;
    if (gridDim.z > 1) {
      float* row = partial_row(q_row);
#pragma unroll
      for (int n = 0; n < HD / 8; ++n)
        *reinterpret_cast<float2*>(row + 8 * n + 2 * tig) = make_float2(o[n][2 * r], o[n][2 * r + 1]);
      if (tig == 0) {
        row[HD] = row_max[r];
        row[HD + 1] = row_sum[r];
      }
      continue;
    }
    const float inv_sum = 1.0f / row_sum[r];
    Act* dst = out + int64_t(token_of(q_row)) * out_stride + head_of(q_row) * HD;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n)
      *reinterpret_cast<uint32_t*>(dst + 8 * n + 2 * tig) =
          pack_pair<Act>(o[n][2 * r] * inv_sum, o[n][2 * r + 1] * inv_sum);
  }
}

// out [t, h hd + col] from the splits' partials (flash_prefill_kernel's layout): the
// splits' O weighted by 2^(max_s - max) over their sums weighted alike.
// Split 0 holds key 0, so every row's max is finite and its sum > 0.
// PRECOND: grid (T, n_heads), blockDim.x = hd.
template <typename Act>
__global__ void flash_merge_kernel(const float* partials, int splits, int T, Act* out, int out_stride) {
  const int t = int(blockIdx.x), h = int(blockIdx.y), n_heads = int(gridDim.y), hd = int(blockDim.x);
  const int64_t split_stride = int64_t(T) * n_heads * (hd + 2);
  const float* row = partials + (int64_t(t) * n_heads + h) * (hd + 2);  // split s: + s split_stride
  float max_all = -INFINITY;
  for (int s = 0; s < splits; ++s) max_all = fmaxf(max_all, row[s * split_stride + hd]);
  float sum = 0.0f, acc = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float m = row[s * split_stride + hd];
    if (m == -INFINITY) continue;  // no key of this row in split s: its O was never written
    const float weight = exp2f(m - max_all);
    sum += weight * row[s * split_stride + hd + 1];
    acc += weight * row[s * split_stride + threadIdx.x];
  }
  out[int64_t(t) * out_stride + h * hd + threadIdx.x] = from_float<Act>(acc / sum);
}

}  // namespace
}  // namespace gemlite
