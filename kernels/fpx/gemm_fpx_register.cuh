#pragma once
// The FPx register kernel (M <= 16; any M where the tiled kernel does not run): W decoded
// in registers, x fragments in registers, split-K over blocks. Included by
// kernels/fpx/gemm_fpx.cu only; gemm_fpx.h has the contract, fpx_format.h the layout.
//
// Work split. A warp owns one row block (16 rows of W: the m of an m16n8k16 mma, W is the
// A operand) and 8 MT rows of x (MT n-tiles of 8: x is the B operand), and walks K by
// tiles of 128 (8 mma k-steps). A block holds warps_n row blocks x warps_k warps splitting
// K (tile t goes to warp t % warps_k), reduced in shared memory; grid = (M chunks of 8 MT,
// row-block groups, splits): the M chunks of one row block are neighbours in launch order,
// so they read the weights from DRAM about once and share them through L2. For small N,
// `splits` blocks split K further and the last one to arrive sums their fp32 partials
// (workspace + counter, one kernel, no second pass). Which variant runs (measured on the
// H100, kernels/fpx/BENCH.md): M <= 8 MT = 1 with one or two tiles of W and x in flight
// ahead (fpx_launch.cpp); M 9..16 MT = 2 (one M chunk per 16 x rows); M > 16 the tiled
// kernel (gemm_fpx_tiled.cuh: wgmma, sm_90, given a scratch buffer for x; elsewhere MT = 2).
// The exact decoding of every code, subnormals included, through all of them is a GPU test
// (tests/gpu/test_gemm_fpx.cu); the launch shapes are chosen in kernels/fpx/fpx_launch.cpp.
//
// Decode epilogues: the fused RMSNorm (gemm_fpx_residual, a pending norm; llama2-7b fp6
// tg128 363.2 -> 371.4 tok/s, same-machine A/B). Tried and dropped: SwiGLU in the epilogue
// (each block the same row block of gate and of up, no repacking; bitwise equal to
// gemm_fpx + silu_mul): 371.8 -> 370.9, and again with the A/B's order alternating
// 371.6 -> 371.6 / 371.2: neutral, silu_mul's launch being hidden by PDL (commit 32055e5
// has it).
//
// Per k-step a lane's 4-bit plane word holds the top nibbles of its 8 codes (rows gid and
// gid + 8, k = 16 s + 4 tig + 0..3; the mma's k order is permuted so that a lane's four
// k are consecutive in memory and its B fragment is one 8-byte load of x). Dequantization
// of 8 codes is pure bit moves, no arithmetic:
//   X    = 4 codes top-aligned in the 4 bytes (plane 4 | plane 2 shifted, one lop3)
//   D1   = per byte: sign | magnitude >> SH  (the high byte of the 16-bit float)
//   D2   = per byte: magnitude << (8 - SH)   (its low byte; bf16 only)
//   pair = prmt(D1, D2): two 16-bit floats whose exponent field is the code's exponent and
//          whose mantissa starts with its mantissa, i.e. value * 2^(bias - 15) (fp16) or
//          value * 2^(bias - 127) (bf16); subnormal codes come out subnormal, exactly.
// fp16: the 2^(15 - bias) is folded into the per-row factor of the fp32 epilogue. bf16:
// one multiply by 2^(127 - bias) (exact) first, since products near 2^-124 would fall
// below fp32's normal range inside the mma.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/device_util.cuh"
#include "kernels/fpx/fpx_format.h"
#include "kernels/fpx/fpx_launch.h"
#include "kernels/fpx/fpx_tile.cuh"
#include "kernels/fpx/gemm_fpx_params.cuh"
#include "kernels/pdl.cuh"

namespace gemlite {
namespace {

// x [k .. k+3] of one row as a B fragment; `full`: all four inside K and 8-byte loads allowed.
__device__ __forceinline__ uint2 load_x4(const uint16_t* row, int k, int K, bool full) {
  if (full) return __ldg(reinterpret_cast<const uint2*>(row + k));
  uint32_t e[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) e[i] = k + i < K ? uint32_t(__ldg(row + k + i)) : 0u;
  return make_uint2(e[0] | e[1] << 16, e[2] | e[3] << 16);
}

// x fragments of one tile (8 k-steps x MT n-tiles) for this lane. FULL: the tile lies
// inside K and x allows 8-byte loads, so each fragment is one load at an immediate offset
// from the tile's start (one branch a tile for the check, not one a fragment).
template <int MT, bool FULL>
__device__ __forceinline__ void load_x_tile(const uint16_t* const (&x_rows)[MT], int k0, int K, uint2 (&xb)[8][MT]) {
#pragma unroll
  for (int s = 0; s < 8; ++s)
#pragma unroll
    for (int j = 0; j < MT; ++j)
      xb[s][j] = FULL ? __ldg(reinterpret_cast<const uint2*>(x_rows[j] + k0 + 16 * s))
                      : load_x4(x_rows[j], k0 + 16 * s, K, false);
}
template <int MT>
__device__ __forceinline__ void load_x_tile(const uint16_t* const (&x_rows)[MT], int k0, int K, bool full,
                                            uint2 (&xb)[8][MT]) {
  if (full)
    load_x_tile<MT, true>(x_rows, k0, K, xb);
  else
    load_x_tile<MT, false>(x_rows, k0, K, xb);
}

// The 8 k-steps of one tile: acc[j] += W tile · x rows of n-tile j, x fragments given.
template <int EBITS, int MBITS, bool BF16, int MT>
__device__ __forceinline__ void tile_mma(const uint32_t (&words)[Planes<EBITS, MBITS>::kWords],
                                         const uint2 (&xb)[8][MT], float (&acc)[MT][4]) {
  static_for<0, 8>([&](auto step) {
    constexpr int S = decltype(step)::value;
    uint32_t a[4];
    dequantize_pairs<EBITS, MBITS, BF16>(code_bytes<EBITS, MBITS, S, 0>(words), a[0], a[1]);
    dequantize_pairs<EBITS, MBITS, BF16>(code_bytes<EBITS, MBITS, S, 1>(words), a[2], a[3]);
#pragma unroll
    for (int j = 0; j < MT; ++j) mma_16816<BF16>(acc[j], a, xb[S][j].x, xb[S][j].y);
  });
}

// The same with x loaded step by step (MT >= 4: a whole tile of x fragments would not fit
// in registers).
template <int EBITS, int MBITS, bool BF16, int MT>
__device__ __forceinline__ void tile_mma_loading_x(const uint32_t (&words)[Planes<EBITS, MBITS>::kWords],
                                                   const uint16_t* const (&x_rows)[MT], int k0, int K, bool full,
                                                   float (&acc)[MT][4]) {
  static_for<0, 8>([&](auto step) {
    constexpr int S = decltype(step)::value;
    uint2 b[MT];
#pragma unroll
    for (int j = 0; j < MT; ++j) b[j] = load_x4(x_rows[j], k0 + 16 * S, K, full);
    uint32_t a[4];
    dequantize_pairs<EBITS, MBITS, BF16>(code_bytes<EBITS, MBITS, S, 0>(words), a[0], a[1]);
    dequantize_pairs<EBITS, MBITS, BF16>(code_bytes<EBITS, MBITS, S, 1>(words), a[2], a[3]);
#pragma unroll
    for (int j = 0; j < MT; ++j) mma_16816<BF16>(acc[j], a, b[j].x, b[j].y);
  });
}


// PRECOND: blockDim.x = 32 warps_n warps_k; dynamic shared memory 512 MT bytes per warp;
// grid = (ceil(M / 8 MT), ceil(RB / warps_n), splits); splits > 1 only with gridDim.x == 1
// and M <= 16.
template <int EBITS, int MBITS, bool BF16, int MT, int AHEAD>
__global__ void __launch_bounds__(MT >= 4 ? 256 : 512) gemm_fpx_kernel(const GemmFpxParams p) {
  using P = Planes<EBITS, MBITS>;
  constexpr int kTileBytes = 256 * P::kBits;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wn = warp / p.warps_k, wk = warp % p.warps_k;
  const int gid = lane / 4, tig = lane % 4;
  const int rb = blockIdx.y * p.warps_n + wn;
  const int m0 = blockIdx.x * 8 * MT;
  const int t_begin = blockIdx.z * p.tiles_per_split;
  const int t_end = min(p.KT, t_begin + p.tiles_per_split);

  // PDL (kernels/pdl.cuh): launched while the kernel before it runs, a warp loads its
  // first tiles of W (they do not depend on it) and only then waits for x; the next kernel
  // may start as soon as all blocks run. Filling every slot before the wait (three tiles at
  // M = 1) measured no faster in decode (kernels/qn/MEASURED.md, 2026-11-27).
  pdl_launch_dependents();
  float acc[MT][4] = {};
  // At M <= 8 the epilogue's reads are issued early, with the loads of x, not after the
  // loop on every block's way out (most of them by the last split's block, after its
  // atomic): the thread's first output's row factor and norm weight (weights) before the
  // wait, its residual element and warp mc's pending-norm parts (row mc; up to 256 parts)
  // after it. A/B on one H200, interleaved (tg128, fp6 with gemv_qn's early residual):
  // tinyllama-1.1b fp6 1361.5 -> 1386.7 tok/s (+1.8 %), kernels/fpx/BENCH.md.
  constexpr int kEarlyNormLoads = 8;
  const bool norm_early =
      MT == 1 && p.norm.sum_squares && m0 + warp < p.M && p.norm.parts <= 32 * kEarlyNormLoads;
  float norm_lane_sum = 0;  // norm_early: row m0 + warp's lane sums
  const int outputs = p.warps_n * kFpxTileRows * 8 * MT;  // (row block, row, x row) of this block
  // The thread's first output, o = threadIdx.x: its only one where the block has as many
  // threads as outputs (warps_k >= 4); later ones read their inputs after the loop.
  const int first_g = threadIdx.x / (kFpxTileRows * 8 * MT), first_rest = threadIdx.x % (kFpxTileRows * 8 * MT);
  const int64_t first_n = int64_t(blockIdx.y * p.warps_n + first_g) * kFpxTileRows + first_rest % kFpxTileRows;
  const int first_m = m0 + first_rest / kFpxTileRows;
  const bool first_early = MT == 1 && int(threadIdx.x) < outputs && first_n < p.N && first_m < p.M;
  const float first_factor = first_early ? p.row_factor[first_n] : 0.0f;
  const float first_norm_weight = first_early && p.residual ? p.norm_weight[first_n] : 0.0f;
  uint16_t first_residual = 0;
  const auto load_epilogue_inputs = [&] {  // after the PDL wait
    if (first_early && p.residual) first_residual = p.residual[int64_t(first_m) * p.N + first_n];
    if (norm_early)
      norm_lane_sum = pending_norm_lane_sum_unrolled<kEarlyNormLoads>(
          p.norm.sum_squares + int64_t(m0 + warp) * p.norm.parts, p.norm.parts);
    asm volatile("" ::"f"(norm_lane_sum));  // summed here, not kept as 8 registers through the loop
  };
  if (rb < p.RB) {
    const uint16_t* x_rows[MT];
#pragma unroll
    for (int j = 0; j < MT; ++j) x_rows[j] = p.x + int64_t(min(m0 + 8 * j + gid, p.M - 1)) * p.K;
    const uint8_t* tiles = p.packed + int64_t(rb) * p.KT * kTileBytes;
    // The next tiles' loads stay in flight while this one is dequantized and multiplied;
    // for MT <= 2 their x fragments too (loading x step by step left each tile waiting on
    // L2 latency: v1 of this kernel ran 8192 x 8192 at M = 1 in 26.2 us, 64 % of copy).
    // MT = 1 can keep two tiles in flight (AHEAD = 2, 122 registers): at one tile ahead
    // its ~16 resident warps a SM hold ~24 KB in flight, short of the ~34 KB a SM that
    // 3 TB/s at ~1.5 us latency needs.
    constexpr bool kPrefetchX = MT <= 2;
    constexpr int kAhead = AHEAD, kSlots = AHEAD + 1;
    // Slot (S + i) % kSlots holds tile t + i warps_k while tile t, in slot S, is computed.
    // MT = 1 (decode) unrolls the loop kSlots times, so that S is a constant and no slot is
    // copied into another: the rolled loop moved 12 words and 8 x fragments a slot each tile
    // (the PTX of the fp6 fp16 loop's fast path: 293 instructions a tile at two tiles ahead,
    // 60 of them moves, -> 227; H100 A/B, fp6 fp16 M = 1: 8192 x 57344 126.7 -> 118.5 us,
    // llama2-7b fp6 tg128 380.5 -> 414.2 tok/s). MT = 2 stays rolled, its slots copied:
    // unrolled (under launch bounds of 256 threads, so that ptxas kept it in 128 registers
    // without spilling) it ran 1-16 % slower on every shape, 7-16 % on all but 8192 x 57344
    // and 4096 x 1024 (same-machine A/B, fp6, M = 12 and 16, fp16 and bf16: 8192 x 8192
    // M = 16 24.3 -> 27.0 us, 4096 x 4096 8.7 -> 9.8). Nor is MT = 2 short of bytes in
    // flight (one tile ahead, 16 warps a SM): an L2 prefetch of the tile after the one in
    // registers, one line a lane, ran 5-20 % slower on every shape (same kind of A/B; 8192 x
    // 8192 M = 16 24.4 -> 26.0, 11008 x 4096 18.4 -> 21.2): it is bound by issue.
    constexpr int kUnroll = MT == 1 ? kSlots : 1;
    uint32_t words[kSlots][P::kWords];
    uint2 xf[kPrefetchX ? kSlots : 1][kPrefetchX ? 8 : 1][MT];
    const int full_tiles = p.x_vectorized ? p.K / kFpxTileK : 0;  // tiles whose x is all inside K
    const auto load_x = [&](int tile, uint2(&into)[8][MT]) {
      load_x_tile<MT>(x_rows, tile * kFpxTileK + 4 * tig, p.K, tile < full_tiles, into);
    };
    const int t0 = t_begin + wk;
#pragma unroll
    for (int i = 0; i < kAhead; ++i)
      if (t0 + i * p.warps_k < t_end) load_tile<EBITS, MBITS>(tiles + int64_t(t0 + i * p.warps_k) * kTileBytes, lane, words[i]);
    pdl_wait();
    if constexpr (kPrefetchX) {
#pragma unroll
      for (int i = 0; i < kAhead; ++i)
        if (t0 + i * p.warps_k < t_end) load_x(t0 + i * p.warps_k, xf[i]);
    }
    load_epilogue_inputs();
    int t = t0;
    while (t < t_end) {
      static_for<0, kUnroll>([&](auto step) {
        constexpr int S = decltype(step)::value, L = (S + kAhead) % kSlots;  // computed, loaded
        if (t >= t_end) return;
        const int ahead = t + kAhead * p.warps_k;
        if (ahead < t_end) {
          load_tile<EBITS, MBITS>(tiles + int64_t(ahead) * kTileBytes, lane, words[L]);
          if constexpr (kPrefetchX) load_x(ahead, xf[L]);
        }
        if constexpr (kPrefetchX) {
          tile_mma<EBITS, MBITS, BF16, MT>(words[S], xf[S], acc);
        } else {
          tile_mma_loading_x<EBITS, MBITS, BF16, MT>(words[S], x_rows, t * kFpxTileK + 4 * tig, p.K, t < full_tiles,
                                                     acc);
        }
        if constexpr (kUnroll == 1) {  // slot i + 1 -> slot i
#pragma unroll
          for (int i = 0; i < kAhead; ++i) {
#pragma unroll
            for (int w = 0; w < P::kWords; ++w) words[i][w] = words[i + 1][w];
            if constexpr (kPrefetchX) {
#pragma unroll
              for (int s = 0; s < 8; ++s)
#pragma unroll
                for (int j = 0; j < MT; ++j) xf[i][s][j] = xf[i + 1][s][j];
            }
          }
        }
        t += p.warps_k;
      });
    }
  } else {
    pdl_wait();  // its threads still write outputs of the block's other row blocks
    load_epilogue_inputs();
  }

  // C fragment of n-tile j: acc[j][0..1] = row gid, x rows 2 tig, 2 tig + 1; [2..3] = row gid + 8.
  extern __shared__ float partial[];  // [warps][MT][4][32]
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[((warp * MT + j) * 4 + i) * 32 + lane] = acc[j][i];
  // A pending norm: r_m from the producer's parts, one warp per x row (a butterfly sum,
  // the same order in every block).
  __shared__ float inv_rms[8 * MT];
  if (p.norm.sum_squares) {
    for (int mc = warp; mc < 8 * MT && m0 + mc < p.M; mc += blockDim.x / 32) {
      const float lane_sum = norm_early && mc == warp
                                 ? norm_lane_sum
                                 : pending_norm_lane_sum(p.norm.sum_squares + int64_t(m0 + mc) * p.norm.parts,
                                                         p.norm.parts);
      const float r = inv_rms_of_lane_sums(lane_sum, p.K, p.norm.eps);
      if (lane == 0) inv_rms[mc] = r;
    }
  }
  __syncthreads();

  const bool split = gridDim.z > 1;
  const int64_t padded_n = int64_t(p.RB) * kFpxTileRows;
  // Output (n, m) of x row mc of the chunk from its fp32 sum over K: y, or with the
  // residual epilogue residual += y and y = residual ∘ norm weight (gemm_fpx_residual).
  // first: o == threadIdx.x, whose inputs first_early loaded.
  const auto finish = [&](float sum, int64_t n, int m, int mc, bool first) {
    const bool early = first_early && first;
    sum *= early ? first_factor : p.row_factor[n];
    if (p.norm.sum_squares) sum *= inv_rms[mc];
    if (p.bias) sum += p.bias[n];
    const int64_t i = int64_t(m) * p.N + n;
    if (!p.residual) {
      p.y[i] = to_activation<BF16>(sum);
      return;
    }
    const uint16_t updated = to_activation<BF16>(from_activation<BF16>(early ? first_residual : p.residual[i]) + sum);
    p.residual[i] = updated;
    p.y[i] = to_activation<BF16>(from_activation<BF16>(updated) * (early ? first_norm_weight : p.norm_weight[n]));
  };
  // With the residual epilogue, after all of a block's outputs: Σ residual² over its 16
  // rows per x row, summed in row order by one thread (deterministic), into partial
  // (free again: every thread has read its sums).
  const auto sum_squares = [&] {
    __syncthreads();  // the block's residual writes are visible, partial's reads done
    for (int o = threadIdx.x; o < kFpxTileRows * 8 * MT; o += blockDim.x) {
      const int mc = o / kFpxTileRows;
      const int64_t n = int64_t(blockIdx.y) * kFpxTileRows + o % kFpxTileRows;
      float square = 0;
      if (n < p.N && m0 + mc < p.M) {
        const float v = from_activation<BF16>(p.residual[int64_t(m0 + mc) * p.N + n]);
        square = v * v;
      }
      partial[o] = square;
    }
    __syncthreads();
    for (int mc = threadIdx.x; mc < 8 * MT && m0 + mc < p.M; mc += blockDim.x) {
      float sum = 0;
      for (int r = 0; r < kFpxTileRows; ++r) sum += partial[mc * kFpxTileRows + r];
      p.sum_squares[int64_t(m0 + mc) * gridDim.y + blockIdx.y] = sum;
    }
  };
  for (int o = threadIdx.x; o < outputs; o += blockDim.x) {
    const int g = o / (kFpxTileRows * 8 * MT), rest = o % (kFpxTileRows * 8 * MT);
    const int mc = rest / kFpxTileRows, r = rest % kFpxTileRows;  // x row in the chunk, row in the block
    const int j = mc / 8, c = mc % 8;
    const int i = (r >= 8 ? 2 : 0) + (c & 1), src = (r % 8) * 4 + c / 2;
    const int64_t n = int64_t(blockIdx.y * p.warps_n + g) * kFpxTileRows + r;
    const int m = m0 + mc;
    if (n >= p.N || m >= p.M) continue;
    float sum = 0;
    for (int w = 0; w < p.warps_k; ++w) sum += partial[(((g * p.warps_k + w) * MT + j) * 4 + i) * 32 + src];
    if (split) {
      p.workspace[(int64_t(blockIdx.z) * kFpxSplitMaxM + m) * padded_n + n] = sum;
    } else {
      finish(sum, n, m, mc, o == int(threadIdx.x));
    }
  }
  if (!split) {
    if (p.residual) sum_squares();
    return;
  }

  // Split-K: the last block of this row-block group to arrive sums all splits' partials.
  __shared__ bool is_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int arrived = atomicAdd(&p.counters[blockIdx.y], 1);
    is_last = arrived == int(gridDim.z) - 1;
    if (is_last) p.counters[blockIdx.y] = 0;  // ready for the next launch (stream-ordered)
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  for (int o = threadIdx.x; o < outputs; o += blockDim.x) {
    const int g = o / (kFpxTileRows * 8 * MT), rest = o % (kFpxTileRows * 8 * MT);
    const int mc = rest / kFpxTileRows, r = rest % kFpxTileRows;
    const int64_t n = int64_t(blockIdx.y * p.warps_n + g) * kFpxTileRows + r;
    const int m = m0 + mc;
    if (n >= p.N || m >= p.M) continue;
    float sum = 0;
    for (int z = 0; z < int(gridDim.z); ++z) sum += __ldcg(p.workspace + (int64_t(z) * kFpxSplitMaxM + m) * padded_n + n);
    finish(sum, n, m, mc, o == int(threadIdx.x));
  }
  if (p.residual) sum_squares();
}

}  // namespace
}  // namespace gemlite
