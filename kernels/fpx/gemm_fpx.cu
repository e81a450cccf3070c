// FPx dequantize + matmul on tensor cores. See gemm_fpx.h for the contract and
// fpx_format.h for the packed layout it reads.
//
// Work split. A warp owns one row block (16 rows of W: the m of an m16n8k16 mma, W is the
// A operand) and 8 MT rows of x (MT n-tiles of 8: x is the B operand), and walks K by
// tiles of 128 (8 mma k-steps). A block holds warps_n row blocks x warps_k warps splitting
// K (tile t goes to warp t % warps_k), reduced in shared memory; grid = (M chunks of 8 MT,
// row-block groups, splits): the M chunks of one row block are neighbours in launch order,
// so they read the weights from DRAM about once and share them through L2. For small N,
// `splits` blocks split K further and the last one to arrive sums their fp32 partials
// (workspace + counter, one kernel, no second pass). Which variant runs (measured on the
// H100, kernels/fpx/BENCH.md): M <= 8 MT = 1 with two tiles of W and x in flight; M 9..16
// MT = 2 (one M chunk per 16 x rows); M > 16 the tiled kernel further down (wgmma, sm_90,
// given a scratch buffer for x; elsewhere MT = 2). The exact decoding of every code, subnormals included, through all of
// them is a GPU test (tests/gpu/test_gemm_fpx.cu).
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
#include "kernels/fpx/gemm_fpx.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/device_upload.h"
#include "kernels/bulk_copy.cuh"
#include "kernels/device_util.cuh"
#include "kernels/fpx/fpx_format.h"
#include "kernels/fpx/fpx_launch.h"
#include "kernels/fpx/fpx_tile.cuh"
#include "kernels/pdl.cuh"
#include "kernels/wgmma.cuh"
#include "runtime/error.h"

namespace gemlite {

namespace {

struct GemmFpxParams {
  const uint8_t* packed;     // [RB, KT * tile bytes]
  const float* row_factor;   // [RB * 16]
  const float* bias;         // [N] or null
  const uint16_t* x;         // [M, K]
  uint16_t* y;               // [M, N]
  float* workspace;          // [splits, 16, RB * 16]
  int* counters;             // [RB]
  int64_t N;
  int K, KT, RB, M;
  int warps_n, warps_k, splits, tiles_per_split;
  bool x_vectorized;         // K % 4 == 0 and x 8-byte aligned
  // The fused RMSNorm (gemm_fpx.h; one M chunk, warps_n = 1): a pending norm of x, and
  // the residual epilogue (residual [M, N], norm_weight [N], sum_squares [M, RB]).
  QnPendingNorm norm;
  uint16_t* residual;
  const float* norm_weight;
  float* sum_squares;
};

template <bool BF16>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint2 b) {
  if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
  }
}

// x [k .. k+3] of one row as a B fragment; `full`: all four inside K and 8-byte loads allowed.
__device__ __forceinline__ uint2 load_x4(const uint16_t* row, int k, int K, bool full) {
  if (full) return __ldg(reinterpret_cast<const uint2*>(row + k));
  uint32_t e[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) e[i] = k + i < K ? uint32_t(__ldg(row + k + i)) : 0u;
  return make_uint2(e[0] | e[1] << 16, e[2] | e[3] << 16);
}

// x fragments of one tile (8 k-steps x MT n-tiles) for this lane.
template <int MT>
__device__ __forceinline__ void load_x_tile(const uint16_t* const (&x_rows)[MT], int k0, int K, bool full,
                                            uint2 (&xb)[8][MT]) {
#pragma unroll
  for (int s = 0; s < 8; ++s)
#pragma unroll
    for (int j = 0; j < MT; ++j) xb[s][j] = load_x4(x_rows[j], k0 + 16 * s, K, full);
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
    for (int j = 0; j < MT; ++j) mma_16816<BF16>(acc[j], a, xb[S][j]);
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
    for (int j = 0; j < MT; ++j) mma_16816<BF16>(acc[j], a, b[j]);
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
  // may start as soon as all blocks run.
  pdl_launch_dependents();
  float acc[MT][4] = {};
  if (rb < p.RB) {
    const uint16_t* x_rows[MT];
#pragma unroll
    for (int j = 0; j < MT; ++j) x_rows[j] = p.x + int64_t(min(m0 + 8 * j + gid, p.M - 1)) * p.K;
    const uint8_t* tiles = p.packed + int64_t(rb) * p.KT * kTileBytes;
    // The next tiles' loads stay in flight while this one is dequantized and multiplied;
    // for MT <= 2 their x fragments too (loading x step by step left each tile waiting on
    // L2 latency: v1 of this kernel ran 8192 x 8192 at M = 1 in 26.2 us, 64 % of copy).
    // MT = 1 can keep two tiles in flight (AHEAD = 2, 114 registers): at one tile ahead
    // its ~16 resident warps a SM hold ~24 KB in flight, short of the ~34 KB a SM that
    // 3 TB/s at ~1.5 us latency needs.
    constexpr bool kPrefetchX = MT <= 2;
    constexpr int kAhead = AHEAD;
    uint32_t words[kAhead + 1][P::kWords];
    uint2 xf[kPrefetchX ? kAhead + 1 : 1][kPrefetchX ? 8 : 1][MT];
    const auto full_tile = [&](int tile) { return p.x_vectorized && (tile + 1) * kFpxTileK <= p.K; };
    const auto load = [&](int tile, int slot) {
      load_tile<EBITS, MBITS>(tiles + int64_t(tile) * kTileBytes, lane, words[slot]);
      if constexpr (kPrefetchX) load_x_tile<MT>(x_rows, tile * kFpxTileK + 4 * tig, p.K, full_tile(tile), xf[slot]);
    };
    const int t0 = t_begin + wk;
#pragma unroll
    for (int i = 0; i < kAhead; ++i)
      if (t0 + i * p.warps_k < t_end) load_tile<EBITS, MBITS>(tiles + int64_t(t0 + i * p.warps_k) * kTileBytes, lane, words[i]);
    pdl_wait();
    if constexpr (kPrefetchX) {
#pragma unroll
      for (int i = 0; i < kAhead; ++i) {
        const int tile = t0 + i * p.warps_k;
        if (tile < t_end) load_x_tile<MT>(x_rows, tile * kFpxTileK + 4 * tig, p.K, full_tile(tile), xf[i]);
      }
    }
    for (int t = t0; t < t_end; t += p.warps_k) {
      const int ahead = t + kAhead * p.warps_k;
      if (ahead < t_end) load(ahead, kAhead);
      if constexpr (kPrefetchX) {
        tile_mma<EBITS, MBITS, BF16, MT>(words[0], xf[0], acc);
      } else {
        tile_mma_loading_x<EBITS, MBITS, BF16, MT>(words[0], x_rows, t * kFpxTileK + 4 * tig, p.K, full_tile(t), acc);
      }
#pragma unroll
      for (int i = 0; i < kAhead; ++i) {  // slot i holds tile t + (i + 1) warps_k next
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
  } else {
    pdl_wait();  // its threads still write outputs of the block's other row blocks
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
      const float r =
          pending_inv_rms(p.norm.sum_squares + int64_t(m0 + mc) * p.norm.parts, p.norm.parts, p.K, p.norm.eps);
      if (lane == 0) inv_rms[mc] = r;
    }
  }
  __syncthreads();

  const int outputs = p.warps_n * kFpxTileRows * 8 * MT;  // (row block, row, x row) of this block
  const bool split = gridDim.z > 1;
  const int64_t padded_n = int64_t(p.RB) * kFpxTileRows;
  // Output (n, m) of x row mc of the chunk from its fp32 sum over K: y, or with the
  // residual epilogue residual += y and y = residual ∘ norm weight (gemm_fpx_residual).
  const auto finish = [&](float sum, int64_t n, int m, int mc) {
    sum *= p.row_factor[n];
    if (p.norm.sum_squares) sum *= inv_rms[mc];
    if (p.bias) sum += p.bias[n];
    const int64_t i = int64_t(m) * p.N + n;
    if (!p.residual) {
      p.y[i] = to_activation<BF16>(sum);
      return;
    }
    const uint16_t updated = to_activation<BF16>(from_activation<BF16>(p.residual[i]) + sum);
    p.residual[i] = updated;
    p.y[i] = to_activation<BF16>(from_activation<BF16>(updated) * p.norm_weight[n]);
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
      finish(sum, n, m, mc);
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
    finish(sum, n, m, mc);
  }
  if (p.residual) sum_squares();
}

// ---- M > 16: W and x staged in shared memory, wgmma, K split across a cluster --------
//
// A block owns WARPS row blocks of W (16 rows each) and 8 MT x rows, and walks its share of
// K by tiles of 128. Its warpgroups each own one 64-row m-tile: warp w holds row block w,
// whose FPx tile it decodes into A fragments exactly as the register kernel does, and per
// k-step its warpgroup issues one wgmma m64 N k16 (N = 8 MT) with x as B from shared
// memory (kernels/wgmma.cuh): the tensor cores run asynchronously while the warps decode
// the next k-steps (a tile's 8 k-steps in two halves, each its own A registers and wgmma
// group). The tiles of W are copied into shared memory with cp.async two tiles ahead (4
// stages: the stage a copy refills was last read by the wgmmas of two tiles back, which
// every warp has waited for by then); x lands in wgmma's K-major core-matrix layout with
// the decoder's k order (a lane's A registers hold the real k 4 tig + 0, 1 and 4 tig + 2,
// 3 of a step where the mma expects k 2 tig + 0, 1 and 2 tig + 8, 9, so B's k-groups of 8
// are the even and the odd pairs of 16 real k): permute_x_kernel first writes x into a
// scratch buffer as the image of the stages, and one thread copies a tile's x with one
// bulk copy (TMA engine, kernels/bulk_copy.cuh) completing on the stage's mbarrier: no x
// in registers, no per-thread copies. Three shapes:
//  - M 17..32 and 33..64: 16 warps, 256 rows of W, 32 or 64 x rows;
//  - wide (M > kFpxWideMinM): 8 warps, 128 rows of W, 128 x rows.
//
// Shapes with few blocks split K over a cluster of `splits` blocks (gridDim.z, at most
// 8): each block leaves its fp32 partial sums in its own shared memory and, after a
// cluster barrier, block z sums the slice z of the outputs over the cluster's blocks in
// rank order (distributed shared memory): deterministic, no global workspace, no second
// kernel.
//
// The wide shape, measured on the way (H100, fp6 fp16, cold L2, 2026-11-27, gemlite-bench
// --kernels --kernel-set fpx, GEMLITE_BENCH_FPX_SWEEP=1): the 64-row tiled shape it
// replaced ran 8192 x 8192 at M = 512 in 247 us (0.37x cuBLAS) and 28672 x 8192 at M = 256
// in 401. A first wide version (256 x rows, n = 256 wgmmas, two 77 KB stages, x by 4-byte
// cp.async straight into the layout) was no faster: on 28672 x 8192 M = 256 it took 473
// us, 464 without decoding, 244 without the x copies, 135 with nothing but the W copies (a
// one-tile-deep pipeline waits out each tile's copies). 128 x rows, four stages and x by
// 16-byte cp.async from the permuted copy: still 0.3-0.5x (ncu, 8192 x 8192 M = 512: L2
// throughput 82 %, DRAM 7 %, 0.20 instructions issued a scheduler a cycle). x multicast to
// clusters of 2-8 blocks (each copying a slice for all, a cluster barrier a tile to free
// the stages) was slower again (8192 x 8192 M = 512: 211-313 us). One bulk copy a tile
// per block: 141 us (0.65x cuBLAS, the dense copy + cuBLAS 165), M = 128 40.9 (1.24x).
// Then the 32/64-row shapes took x the same way instead of through registers (loaded two
// tiles ahead, stored into the stage by the threads): A/B on one H200, fp16, two rounds,
// us at M = 32 / 64: 4096 x 12288 28.1 / 40.5 -> 26.0 / 31.4, 4096 x 22016 42.8 / 60.4 ->
// 39.3 / 47.6, 11008 x 4096 34.8 / 50.3 -> 31.9 / 37.8, 8192 x 8192 41.6 / 59.3 -> 37.4 /
// 46.2, 4096 x 4096 13.7 / 19.9 -> 13.1 / 15.9 (M = 17 and 48 likewise).
//
// Earlier versions, measured on the way (H100, fp6 fp16, cold L2, gemlite-bench --kernels
// --kernel-set fpx with GEMLITE_BENCH_FPX_SPLITS=1,2,4,8): the shared-memory kernel this one
// replaced (x staged two tiles deep, W loaded to registers one tile ahead, one row block a
// warp, no split) waited on the W loads of each tile: 8192 x 8192 at M = 64 in 111.9 us
// (0.44x cuBLAS), 4096 x 4096 in 31.6 (0.47x). A first version of this one, 8 warps of two
// row blocks each with mma.sync, ran 4096 x 22016 at M = 64 in 75 us and at M = 512 in 465 (~200 TFLOP/s), and with wgmma
// no faster: ncu (4096 x 4096, M = 64, no split) showed ~860 instructions a warp a tile at
// 0.37 issued a scheduler a cycle (2 warps a scheduler; stalls on fixed-latency
// dependencies and shared-memory loads), the tensor cores mostly idle. Computing the copy
// addresses once took 8192 x 8192 M = 64 67.5 -> 60.9 us; 16 warps (one row block each)
// instead of 8 then 60.9 -> 56.5, 4096 x 22016 M = 64 63.8 -> 58.5. Tried and dropped: 5
// stages, 3 tiles ahead (200 KB of shared memory): 3-7 % slower on every shape at M = 32-128
// (8192 x 8192 M = 64 57.4 -> 60.8 us, A/B in one device session). Still issue-bound: the
// decode (lop3/shift/prmt per pair) and the per-tile copies are what a faster version
// must cut (kernels/fpx/BENCH.md has the table against cuBLAS and the dense copy).
constexpr int kTiledStages = 4;
constexpr int kTiledAhead = 2;      // tiles copied ahead of the one computed

// A shape of the tiled kernel (above): WARPS warps, 8 MT x rows.
template <int EBITS, int MBITS, int MT, int WARPS>
struct TiledLayout {
  static constexpr int kRowsX = 8 * MT;
  static constexpr int kTileBytes = 256 * Planes<EBITS, MBITS>::kBits;
  static constexpr int kWBytes = WARPS * kTileBytes;  // [WARPS row blocks][tile]
  static constexpr int kGroupBytes = kRowsX * 16;   // one k-group (8 k) of the kRowsX rows, 16 bytes a row
  static constexpr int kXBytes = 16 * kGroupBytes;  // [8 steps][2 k-groups][kRowsX rows][8 k]
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kPartStride = WARPS * kFpxTileRows + 4;  // floats a partial-sum row: conflict-free stores
  static constexpr int kPartBytes = kRowsX * kPartStride * 4;   // [x rows][kPartStride] after the loop
  static constexpr int kStagesBytes = kTiledStages * kStageBytes > kPartBytes ? kTiledStages * kStageBytes : kPartBytes;
  static constexpr int kSmemBytes = kStagesBytes + kTiledStages * 8;  // + a stage's mbarrier
};

// Real k 16 s + 0..15 of a row as the B k-groups of step s: group 0 holds the even pairs
// (real k 0, 1, 4, 5, 8, 9, 12, 13), group 1 the odd ones (see the top of this section).
__device__ __forceinline__ void split_pairs(uint4 u0, uint4 u1, uint4& group0, uint4& group1) {
  group0 = make_uint4(u0.x, u0.z, u1.x, u1.z);
  group1 = make_uint4(u0.y, u0.w, u1.y, u1.w);
}

// The tiled kernel's x, in the image of its stages: xp [ceil(M / R)][KT][16 k-groups][R
// rows][8 k] (R = rows_x, a block's x rows), the k-groups of each 16 k in the order of
// split_pairs, zero past M and K, so that a block's x of one tile is one contiguous copy.
// One thread a 16-k step of a row.
__global__ void permute_x_kernel(const uint16_t* x, uint16_t* xp, int M, int K, int KT, int rows_x) {
  pdl_launch_dependents();
  pdl_wait();
  const int steps = KT * 8;
  const int rows = (M + rows_x - 1) / rows_x * rows_x;
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= int64_t(rows) * steps) return;
  const int m = int(j / steps), s = int(j % steps);
  const uint16_t* row = x + int64_t(m) * K;
  uint4 u[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = 16 * s + 8 * h;  // K % 8 == 0: eight k are all inside or all past K
    u[h] = m < M && k < K ? *reinterpret_cast<const uint4*>(row + k) : make_uint4(0, 0, 0, 0);
  }
  const int64_t tile = int64_t(m / rows_x) * KT + s / 8;
  uint4* group0 = reinterpret_cast<uint4*>(xp + (tile * 16 + 2 * (s % 8)) * rows_x * 8 + (m % rows_x) * 8);
  split_pairs(u[0], u[1], group0[0], group0[rows_x]);
}

// PRECOND: blockDim.x = 32 WARPS, dynamic shared memory TiledLayout::kSmemBytes, grid =
// (ceil(M / 8 MT), ceil(RB / WARPS), splits) in clusters of (1, 1, splits), splits a power
// of two <= 8, tiles_per_split = ceil(KT / splits), K % 8 == 0, a device of compute
// capability 9.0 (wgmma); p.x is permute_x_kernel's image for 8 MT rows (whose x must be
// 16-byte aligned).
template <int EBITS, int MBITS, bool BF16, int MT, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, 1) gemm_fpx_tiled_kernel(const __grid_constant__ GemmFpxParams p) {
  using P = Planes<EBITS, MBITS>;
  using L = TiledLayout<EBITS, MBITS, MT, WARPS>;
  constexpr int kThreads = WARPS * 32;
  constexpr int kRowsX = L::kRowsX;
  extern __shared__ uint4 smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem_raw);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int rb0 = blockIdx.y * WARPS;  // the block's first row block
  const int m0 = blockIdx.x * kRowsX;
  const int splits = int(gridDim.z), split = int(blockIdx.z);  // split = the block's rank in its cluster
  const int t_begin = min(split * p.tiles_per_split, p.KT);  // a split past K gets no tile
  const int n_tiles = max(0, min(p.KT, t_begin + p.tiles_per_split) - t_begin);

  const auto stage_of = [&](int i) { return smem + (i % kTiledStages) * L::kStageBytes; };
  // W of tile i (the row blocks below RB) into its stage: a thread's pieces (16 bytes
  // each) sit at the same places of every tile, so their addresses are computed once
  // (the per-tile index arithmetic had been ~170 of ~860 instructions a warp a tile).
  constexpr int kWPieces = WARPS * L::kTileBytes / 16;
  constexpr int kWCopies = (kWPieces + kThreads - 1) / kThreads;
  const uint8_t* w_src[kWCopies];  // tile t_begin's piece
  uint32_t w_dst[kWCopies];        // offset in a stage; ~0u: nothing to copy
#pragma unroll
  for (int q = 0; q < kWCopies; ++q) {
    const int c = q * kThreads + int(threadIdx.x);
    const int r = c / (L::kTileBytes / 16), piece = c % (L::kTileBytes / 16);
    const bool copies = c < kWPieces && rb0 + r < p.RB;
    w_src[q] = p.packed + (int64_t(copies ? rb0 + r : 0) * p.KT + t_begin) * L::kTileBytes + piece * 16;
    w_dst[q] = copies ? uint32_t(r * L::kTileBytes + piece * 16) : ~0u;
  }
  const auto copy_w = [&](int i) {
    uint8_t* stage = stage_of(i);
#pragma unroll
    for (int q = 0; q < kWCopies; ++q)
      if (w_dst[q] != ~0u) cp_async16(stage + w_dst[q], w_src[q] + int64_t(i) * L::kTileBytes);
  };

  // x of tile i: thread 0 expects the tile's bytes on the stage's mbarrier and copies them,
  // one bulk copy (the TMA engine) of permute_x_kernel's image.
  uint64_t* x_landed = reinterpret_cast<uint64_t*>(smem + L::kStagesBytes);  // [stage]
  const auto copy_x = [&](int i) {
    if (threadIdx.x != 0) return;
    uint64_t* landed = &x_landed[i % kTiledStages];
    mbarrier_arrive_expect(landed, L::kXBytes);
    bulk_copy(stage_of(i) + L::kWBytes,
              reinterpret_cast<const uint8_t*>(p.x) + (int64_t(blockIdx.x) * p.KT + t_begin + i) * L::kXBytes,
              L::kXBytes, landed);
  };

  // PDL: the first tiles of W before the wait for x. cp.async groups (W only): W 0, W 1,
  // then one a loop step (W of tile i + 2), so "all but the newest one done" means W of
  // tile i landed.
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kTiledStages; ++stage) mbarrier_init(&x_landed[stage], 1);
    fence_mbarrier_init();
  }
  __syncthreads();  // the mbarriers ready before any thread waits on them
  pdl_launch_dependents();
#pragma unroll
  for (int i = 0; i < kTiledAhead; ++i) {
    if (i < n_tiles) copy_w(i);
    cp_async_commit();
  }
  pdl_wait();
#pragma unroll
  for (int i = 0; i < kTiledAhead; ++i)
    if (i < n_tiles) copy_x(i);

  float acc[MT][4] = {};  // [n-tile][C fragment] of the warp's row block
  uint32_t a_lo[4][4] = {}, a_hi[4][4] = {};  // A fragments of k-steps 0-3 and 4-7, [step][register]
  // Warps past RB still issue their warpgroup's wgmmas (they are collective), on rows that are never stored.
  const bool warp_active = rb0 + warp < p.RB;
  for (int i = 0; i < n_tiles; ++i) {
    cp_async_wait<kTiledAhead - 1>();
    mbarrier_wait(&x_landed[i % kTiledStages], uint32_t(i / kTiledStages) & 1);
    __syncthreads();  // tile i's W and x visible; every warp has waited for the wgmmas of tile i - 2
    const bool refill = i + kTiledAhead < n_tiles;
    if (refill) {
      copy_w(i + kTiledAhead);
      copy_x(i + kTiledAhead);
    }
    cp_async_commit();
    const uint8_t* stage = stage_of(i);
    uint32_t words[P::kWords];
    if (warp_active) load_tile<EBITS, MBITS, true>(stage + warp * L::kTileBytes, lane, words);
    const uint8_t* x_stage = stage + L::kWBytes;
    // Two halves of the tile, 4 k-steps each, in their own registers and wgmma group: the
    // decode of one half runs while the tensor cores multiply the other.
    static_for<0, 2>([&](auto half) {
      constexpr int H = decltype(half)::value;
      uint32_t(&a)[4][4] = H == 0 ? a_lo : a_hi;
      wgmma_wait<1>();  // the group that last read `a` (this half of tile i - 1) is done
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int q = 0; q < 4; ++q) wgmma_keep(a[s][q]);
      if (warp_active) {
        static_for<0, 4>([&](auto step) {
          constexpr int S = 4 * H + decltype(step)::value;
          dequantize_pairs<EBITS, MBITS, BF16>(code_bytes<EBITS, MBITS, S, 0>(words), a[S % 4][0], a[S % 4][1]);
          dequantize_pairs<EBITS, MBITS, BF16>(code_bytes<EBITS, MBITS, S, 1>(words), a[S % 4][2], a[S % 4][3]);
        });
      }
      wgmma_fence();
#pragma unroll
      for (int step = 0; step < 4; ++step)
        wgmma_rs<kRowsX, BF16>(acc, a[step],
                               wgmma_desc(x_stage + 2 * (4 * H + step) * L::kGroupBytes, L::kGroupBytes, 128));
      wgmma_commit();
    });
  }
  wgmma_wait<0>();
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      wgmma_keep(a_lo[s][q]);
      wgmma_keep(a_hi[s][q]);
    }
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) wgmma_keep(acc[j][q]);

  // Partial sums into shared memory as [x row][row of the block]; C fragment of n-tile j:
  // acc[j][0..1] = row gid, x rows 8 j + 2 tig + 0/1; [2..3] = row gid + 8.
  cp_async_wait<0>();
  __syncthreads();  // the stages are free
  float* part = reinterpret_cast<float*>(smem);
  const int gid = lane / 4, tig = lane % 4;
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        part[(8 * j + 2 * tig + e) * L::kPartStride + warp * kFpxTileRows + gid + 8 * h] = acc[j][2 * h + e];
  if (splits > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }
  // Block `split` finishes outputs [split, split + 1) * per of the (x row, row) pairs, rows fastest (coalesced y).
  constexpr int kRows = WARPS * kFpxTileRows;
  constexpr int kOutputs = kRowsX * kRows;
  const int per = kOutputs / splits;
  for (int o = split * per + int(threadIdx.x); o < (split + 1) * per; o += blockDim.x) {
    const int mc = o / kRows, row = o % kRows;
    const int64_t n = int64_t(rb0) * kFpxTileRows + row;
    const int m = m0 + mc;
    if (n >= p.N || m >= p.M) continue;
    // All ranks' loads in flight before the sum (in rank order): one distributed shared
    // memory round trip an output, not `splits`.
    float parts[kFpxTiledMaxSplits];
#pragma unroll
    for (int q = 0; q < kFpxTiledMaxSplits; ++q)
      parts[q] = q < splits ? load_cluster_shared(part + mc * L::kPartStride + row, unsigned(q)) : 0.0f;
    float sum = 0;
#pragma unroll
    for (int q = 0; q < kFpxTiledMaxSplits; ++q) sum += parts[q];
    p.y[int64_t(m) * p.N + n] = to_activation<BF16>(sum * p.row_factor[n] + (p.bias ? p.bias[n] : 0.0f));
  }
  if (splits > 1) cluster_sync();  // no block leaves while another may still read its partial sums
}

using KernelFn = void (*)(GemmFpxParams);

template <int EBITS, int MBITS, bool BF16>
KernelFn pick_mt(int mt, int ahead) {
  switch (mt) {
    case 1: return ahead == 2 ? gemm_fpx_kernel<EBITS, MBITS, BF16, 1, 2> : gemm_fpx_kernel<EBITS, MBITS, BF16, 1, 1>;
    case 2: return gemm_fpx_kernel<EBITS, MBITS, BF16, 2, 1>;
    case 4: return gemm_fpx_kernel<EBITS, MBITS, BF16, 4, 1>;
    default: return gemm_fpx_kernel<EBITS, MBITS, BF16, 8, 1>;
  }
}

// The tiled kernel's shapes (TiledLayout): MT and warps.
enum class TiledShape { kTiled32, kTiled64, kWide };

// A tiled kernel, its shared memory allowance raised once (it needs more than the default
// 48 KB), with its shared memory bytes.
struct TiledKernel {
  KernelFn kernel;
  size_t smem_bytes;
};
template <int EBITS, int MBITS, bool BF16, int MT, int WARPS>
TiledKernel tiled_kernel() {
  constexpr size_t kSmem = TiledLayout<EBITS, MBITS, MT, WARPS>::kSmemBytes;
  static const KernelFn kernel = [] {
    const KernelFn k = gemm_fpx_tiled_kernel<EBITS, MBITS, BF16, MT, WARPS>;
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
    return k;
  }();
  return {kernel, kSmem};
}
template <int EBITS, int MBITS, bool BF16>
TiledKernel tiled_kernel(TiledShape shape) {
  switch (shape) {
    case TiledShape::kTiled32: return tiled_kernel<EBITS, MBITS, BF16, 4, 16>();
    case TiledShape::kTiled64: return tiled_kernel<EBITS, MBITS, BF16, 8, 16>();
    default: return tiled_kernel<EBITS, MBITS, BF16, 16, 8>();
  }
}
TiledKernel pick_tiled_kernel(int ebits, int mbits, bool bf16, TiledShape shape) {
  return with_fpx_code(ebits, mbits, "gemm_fpx", [&](auto e, auto m) -> TiledKernel {
    constexpr int E = decltype(e)::value, B = decltype(m)::value;
    return bf16 ? tiled_kernel<E, B, true>(shape) : tiled_kernel<E, B, false>(shape);
  });
}

KernelFn pick_kernel(int ebits, int mbits, bool bf16, int mt, int ahead) {
  return with_fpx_code(ebits, mbits, "gemm_fpx", [&](auto e, auto m) {
    constexpr int E = decltype(e)::value, B = decltype(m)::value;
    return bf16 ? pick_mt<E, B, true>(mt, ahead) : pick_mt<E, B, false>(mt, ahead);
  });
}

int sm_count() {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// Whether the tiled kernel serves this weight: a device of compute capability 9.0 (wgmma,
// thread-block clusters, 227 KB of shared memory a block; the kernel takes <= 177 KB)
// running the kernel's sm_90a code -- not PTX of an older architecture compiled at load,
// where the wgmma and cluster helpers are empty (kernels/wgmma.cuh) -- and K % 8 == 0
// (16-byte copies of x and W). The device is read once per process (one GPU).
bool tiled_kernel_runs(const FpxDeviceWeight& w) {
  static const bool runs = [] {
    int device = 0, major = 0, minor = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    if (major != 9 || minor != 0) return false;
    cudaFuncAttributes attributes{};
    CUDA_CHECK(cudaFuncGetAttributes(&attributes, gemm_fpx_tiled_kernel<3, 2, false, 4, 16>));
    return attributes.ptxVersion >= 90;
  }();
  return runs && w.K % 8 == 0;
}

}  // namespace

size_t FpxDeviceWeight::weight_bytes() const {
  return size_t(row_blocks) * size_t(k_tiles) * size_t(fpx_tile_bytes(bits)) + size_t(N) * 4 +
         (bias ? size_t(N) * 4 : 0);
}

FpxDeviceWeight alloc_fpx_weight(const WeightFormat& format, int64_t N, int64_t K, DType act) {
  const std::string where = "upload_fpx_weight (" + format.name() + ")";
  if (format.kind != FormatKind::FPX) fail(where, "not an fp6/fp5 weight");
  if (act != DType::F16 && act != DType::BF16)
    fail(where, std::string("activation type ") + dtype_name(act) + " (expected F16 or BF16)");
  if (K > (int64_t(1) << 30)) fail(where, "K = " + std::to_string(K) + " too large for the GPU kernel");
  pick_kernel(format.ebits, format.mbits, act == DType::BF16, 1, 1);  // throws for a code it was not built for
  FpxDeviceWeight d;
  d.act = act;
  d.ebits = format.ebits;
  d.mbits = format.mbits;
  d.bits = format.bits;
  d.N = N;
  d.K = K;
  d.k_tiles = fpx_k_tiles(K);
  d.row_blocks = fpx_row_blocks(N);
  // The most blocks split-K will use for this shape (M = 1 splits the most).
  d.max_splits = fpx_register_launch(d.row_blocks, d.k_tiles, 1, sm_count(), 0).splits;
  const size_t padded_n = size_t(d.row_blocks) * kFpxTileRows;
  try {
    d.packed = static_cast<uint8_t*>(device_weight_alloc(size_t(d.row_blocks * d.k_tiles * fpx_tile_bytes(d.bits))));
    d.row_factor = static_cast<float*>(device_weight_alloc(padded_n * 4));
    if (d.max_splits > 1) {
      d.workspace = static_cast<float*>(device_weight_alloc(size_t(d.max_splits) * kFpxSplitMaxM * padded_n * 4));
      d.counters = static_cast<int*>(device_weight_alloc(size_t(d.row_blocks) * 4));
      CUDA_CHECK(cudaMemset(d.counters, 0, size_t(d.row_blocks) * 4));
    }
  } catch (...) {
    free_fpx_weight(&d);
    throw;
  }
  return d;
}

FpxDeviceWeight upload_fpx_weight(const PackedWeight& w, DType act) {
  const std::string where = "upload_fpx_weight (" + w.format.name() + ")";
  const HostTensor& packed = w.part("packed");
  const size_t packed_bytes = size_t(fpx_row_blocks(w.rows) * fpx_k_tiles(w.cols) * fpx_tile_bytes(w.format.bits));
  if (w.format.kind == FormatKind::FPX && packed.nbytes() != packed_bytes)
    fail(where, "packed has shape " + packed.shape_string());
  FpxDeviceWeight d = alloc_fpx_weight(w.format, w.rows, w.cols, act);
  const uint16_t* scales = w.part("scales").as<uint16_t>();  // [N]
  const int bias_exponent = (1 << (d.ebits - 1)) - 1;
  std::vector<float> factor(size_t(d.row_blocks * kFpxTileRows), 0.0f);
  for (int64_t n = 0; n < d.N; ++n)
    factor[size_t(n)] = half_to_float(scales[n]) * (act == DType::F16 ? std::ldexp(1.0f, 15 - bias_exponent) : 1.0f);
  try {
    CUDA_CHECK(cudaMemcpy(const_cast<uint8_t*>(d.packed), packed.data, packed_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(const_cast<float*>(d.row_factor), factor.data(), factor.size() * 4, cudaMemcpyHostToDevice));
    d.bias = upload_bias(w);
  } catch (...) {
    free_fpx_weight(&d);
    throw;
  }
  return d;
}

void free_fpx_weight(FpxDeviceWeight* w) {
  device_weight_free(w->packed);
  device_weight_free(w->row_factor);
  device_weight_free(w->bias);
  device_weight_free(w->workspace);
  device_weight_free(w->counters);
  *w = FpxDeviceWeight{};
}

namespace {

// Epilogues besides y = x · Wᵀ (+ bias): a pending norm, the residual stream.
struct Epilogue {
  const QnPendingNorm* norm = nullptr;
  void* scratch = nullptr;  // gemm_fpx_scratch_bytes: x permuted for the tiled kernel
  void* residual = nullptr;
  const float* norm_weight = nullptr;
  float* sum_squares = nullptr;
};

void launch_gemm_fpx(const FpxDeviceWeight& w, const void* x, void* y, int M, DType act, cudaStream_t stream,
                     const GemmFpxConfig& config, const Epilogue& epilogue) {
  if (M < 1) throw Error("gemm_fpx: M = " + std::to_string(M) + " (expected >= 1)");
  if (act != w.act)
    throw Error(std::string("gemm_fpx: activations are ") + dtype_name(act) + " but the weight was uploaded for " +
                dtype_name(w.act));
  if (!w.packed) throw Error("gemm_fpx: weight not uploaded");
  if (config.tiles_ahead < 0 || config.tiles_ahead > 2)
    throw Error("gemm_fpx: tiles_ahead = " + std::to_string(config.tiles_ahead) + " (expected 0, 1 or 2)");
  if (config.m_tile != 0 && config.m_tile != 1 && config.m_tile != 2 && config.m_tile != 4 && config.m_tile != 8)
    throw Error("gemm_fpx: m_tile = " + std::to_string(config.m_tile) + " (expected 1, 2, 4 or 8)");
  static const int sms = sm_count();
  int resident_warps = 0;  // of the MT = 2 kernel (M 9..16 in the register kernel)
  if (M > 8 && M <= 16) {
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &resident_warps, reinterpret_cast<const void*>(pick_kernel(w.ebits, w.mbits, act == DType::BF16, 2, 1)), 32,
        2 * 4 * 32 * sizeof(float)));
  }
  const FpxRegisterLaunch s = fpx_register_launch(w.row_blocks, w.k_tiles, M, sms, resident_warps, config,
                                                  w.max_splits);
  GemmFpxParams p;
  p.packed = w.packed;
  p.row_factor = w.row_factor;
  p.bias = w.bias;
  p.x = static_cast<const uint16_t*>(x);
  p.y = static_cast<uint16_t*>(y);
  p.workspace = w.workspace;
  p.counters = w.counters;
  p.N = w.N;
  p.K = int(w.K);
  p.KT = int(w.k_tiles);
  p.RB = int(w.row_blocks);
  p.M = M;
  p.warps_n = s.warps_n;
  p.warps_k = s.warps_k;
  p.splits = s.splits;
  p.tiles_per_split = int((w.k_tiles + s.splits - 1) / s.splits);
  p.x_vectorized = w.K % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0;
  p.norm = epilogue.norm ? *epilogue.norm : QnPendingNorm{};
  check_pending_norm(p.norm, "gemm_fpx");
  p.residual = static_cast<uint16_t*>(epilogue.residual);
  p.norm_weight = epilogue.norm_weight;
  p.sum_squares = epilogue.sum_squares;
  const bool fused_norm = p.norm.sum_squares || p.residual;
  // M > kFpxMaxM: the tiled kernel on an H100-class device (wgmma), given a scratch buffer
  // for the permuted copy of x and an x aligned for permute_x_kernel's 16-byte loads;
  // above kFpxWideMinM its wide shape.
  const bool tiled_ok = tiled_kernel_runs(w) && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const bool automatic = config.tiled < 0 && config.m_tile == 0 && config.warps_k == 0;
  if (config.tiled < -1 || config.tiled > 2)
    throw Error("gemm_fpx: tiled = " + std::to_string(config.tiled) + " (expected -1, 0, 1 or 2)");
  if (config.tiled > 0 && tiled_ok && !epilogue.scratch)
    throw Error("gemm_fpx: the tiled kernel needs a scratch buffer (gemm_fpx_scratch_bytes)");
  const bool use_tiled = tiled_ok && epilogue.scratch && (config.tiled > 0 || (automatic && M > kFpxMaxM));
  const bool use_wide = use_tiled && (config.tiled == 2 || (automatic && M > kFpxWideMinM));
  if (use_tiled && reinterpret_cast<uintptr_t>(epilogue.scratch) % 16 != 0)
    throw Error("gemm_fpx: the scratch buffer must be 16-byte aligned");
  // The norm epilogues sit in the register kernel's one-chunk shape only (M <= kFpxMaxM).
  if (fused_norm && (use_tiled || s.warps_n != 1 || (M + 8 * s.mt - 1) / (8 * s.mt) != 1))
    throw Error("gemm_fpx: a fused RMSNorm at M = " + std::to_string(M) + " (expected 1.." +
                std::to_string(kFpxMaxM) + ", one chunk of x rows per block)");
  if (use_tiled) {
    const TiledShape shape = use_wide ? TiledShape::kWide : M <= 32 ? TiledShape::kTiled32 : TiledShape::kTiled64;
    const int rows_x = use_wide ? 128 : M <= 32 ? 32 : 64, warps = use_wide ? 8 : 16;
    const int64_t m_chunks = (M + rows_x - 1) / rows_x;
    const int64_t groups = (w.row_blocks + warps - 1) / warps;
    // One block a SM (its shared memory), K split over a cluster (fpx_tiled_splits).
    if (config.splits > 0 && (config.splits > kFpxTiledMaxSplits || (config.splits & (config.splits - 1)) != 0))
      throw Error("gemm_fpx: splits = " + std::to_string(config.splits) + " for the tiled kernel (expected 1, 2, 4 or 8)");
    const int splits = config.splits > 0 ? config.splits : fpx_tiled_splits(groups, w.k_tiles, m_chunks, use_wide, sms);
    p.splits = splits;
    p.tiles_per_split = int((w.k_tiles + splits - 1) / splits);
    // x into the scratch as the image of the kernel's stages, which the kernel reads as p.x.
    uint16_t* image = static_cast<uint16_t*>(epilogue.scratch);
    const int64_t steps = m_chunks * rows_x * w.k_tiles * 8;  // one thread a 16-k step of a row
    launch_pdl("permute_x_kernel", permute_x_kernel, dim3(unsigned((steps + 255) / 256)), dim3(256), 0, stream, p.x,
               image, M, p.K, p.KT, rows_x);
    p.x = image;
    const dim3 grid{unsigned(m_chunks), unsigned(groups), unsigned(splits)};
    const TiledKernel tiled = pick_tiled_kernel(w.ebits, w.mbits, act == DType::BF16, shape);
    launch_pdl_clusters("gemm_fpx_tiled_kernel", tiled.kernel, grid, dim3(1, 1, unsigned(splits)),
                        dim3(unsigned(warps * 32)), tiled.smem_bytes, stream, p);
    return;
  }
  const int warps = s.warps_n * s.warps_k;
  const size_t smem = size_t(warps) * s.mt * 4 * 32 * sizeof(float);
  const dim3 grid(unsigned((M + 8 * s.mt - 1) / (8 * s.mt)), unsigned((w.row_blocks + s.warps_n - 1) / s.warps_n),
                  unsigned(s.splits));
  const KernelFn kernel = pick_kernel(w.ebits, w.mbits, act == DType::BF16, s.mt, s.ahead);
  launch_pdl("gemm_fpx_kernel", kernel, grid, dim3(unsigned(warps * 32)), smem, stream, p);
}

}  // namespace

void gemm_fpx(const FpxDeviceWeight& w, const void* x, void* y, int M, DType act, cudaStream_t stream,
              const GemmFpxConfig& config, const QnPendingNorm* norm, void* scratch) {
  Epilogue epilogue;
  epilogue.norm = norm;
  epilogue.scratch = scratch;
  launch_gemm_fpx(w, x, y, M, act, stream, config, epilogue);
}

int64_t gemm_fpx_norm_parts(const FpxDeviceWeight& w) { return w.row_blocks; }

size_t gemm_fpx_scratch_bytes(const FpxDeviceWeight& w, int M) {
  return tiled_kernel_runs(w) ? size_t((M + 127) / 128 * 128) * size_t(w.k_tiles) * kFpxTileK * 2 : 0;
}

int gemm_fpx_max_m(const FpxDeviceWeight& w) { return tiled_kernel_runs(w) ? kFpxTiledMaxM : kFpxMaxM; }

void gemm_fpx_residual(const FpxDeviceWeight& w, const void* x, void* residual, const float* norm_weight,
                       void* scaled, float* sum_squares, int M, DType act, cudaStream_t stream) {
  if (!residual || !norm_weight || !sum_squares)
    throw Error("gemm_fpx_residual: the residual, norm weight and sum-of-squares pointers must be set");
  Epilogue epilogue;
  epilogue.residual = residual;
  epilogue.norm_weight = norm_weight;
  epilogue.sum_squares = sum_squares;
  launch_gemm_fpx(w, x, scaled, M, act, stream, {}, epilogue);
}

}  // namespace gemlite
