#pragma once
// FPx (fp6 e3m2, fp5 e2m2) dequantize + matmul on tensor cores, for any batch:
//   y [M, N] = x [M, K] · Wᵀ (+ bias),  W [N, K] pre-packed as in kernels/fpx/fpx_format.h,
// x and y fp16 or bf16, fp32 accumulation (mma m16n8k16 up to M = 16, wgmma m64 above on
// an H100 given a scratch buffer for x), any M >= 1, any K and N.
// The launch is asynchronous on the caller's stream, allocates nothing and never
// synchronizes, so it can be captured into a CUDA graph.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fpx/fpx_launch.h"
#include "kernels/packed_weight.h"
#include "kernels/qn/gemv_qn.h"  // QnPendingNorm: the fused RMSNorm's contract
#include "runtime/dtype.h"

namespace gemlite {

// The largest M of the register kernel (x fragments in registers, split-K over blocks)
// and of the fused RMSNorm epilogues: decode. Measured (H100, cold L2, 2026-11-22,
// kernels/fpx/BENCH.md, cuBLAS of the same dtype in the same run): at M = 16 it is
// 1.1-1.8x faster than cuBLAS on every Llama shape but 4096 x 1024 (0.96-0.99x).
// Above it the tiled kernel (W and x staged in shared memory, wgmma; sm_90), given a
// scratch buffer for x (gemm_fpx_scratch_bytes); at M 9..16 too on weights with N >= 3.5 K
// whose tiled grid fills its waves (fpx_tiled_at_small_m: 8192 x 57344 2.09x -> 2.36x
// cuBLAS, H100).
constexpr int kFpxMaxM = 16;

// Above kFpxMaxM the tiled kernel has three shapes: narrow (32 or 64 x rows, 256 rows of W
// a block), wide (128 x rows, 128 rows of W) and wide and tall (128 x rows, 256 rows of W);
// fpx_tiled_launch (kernels/fpx/fpx_launch.cpp) picks the shape and the cluster size
// together from the shape of W and M, by a cost fitted to sweeps of every shape at every
// cluster size (the narrow shape only up to kFpxNarrowMaxM). History: the wide shape
// first ran from M = 65 on (at M = 128 it took 24.2-49.0 us where the 64-row shape took
// 35.9-85.6 on four Llama shapes, H100); the 256-row shape came with the eighteenth
// session (M = 512 8192 x 8192 156.1 -> 135.8 us on one H200) and lost to the 128-row one
// on 11008 x 4096 at M = 256 (58.5 -> 86.2): neither the size nor the shape follows from M
// alone.

// An fp6/fp5 weight in device memory, prepared for one activation type. Owns its buffers
// (free with free_fpx_weight), including the split-K workspace, so one weight must not be
// used by two launches running at the same time on different streams.
struct FpxDeviceWeight {
  const uint8_t* packed = nullptr;     // [ceil(N/16), KT * 256 * bits], unchanged from the checkpoint
  // [ceil(N/16) * 16] the row's fp16 scale times the power of two that turns the kernel's
  // bit-moved weights into true values (2^(15 - bias) for fp16; 1 for bf16, whose weights
  // are rescaled in registers): applied once per output in the fp32 epilogue.
  const float* row_factor = nullptr;
  const float* bias = nullptr;         // [N] or null
  float* workspace = nullptr;          // [max_splits, 16, ceil(N/16) * 16] split-K partial sums
  int* counters = nullptr;             // [ceil(N/16)] split-K arrivals, back to 0 after each launch
  DType act = DType::F16;              // F16 or BF16
  int ebits = 0, mbits = 0, bits = 0;
  int64_t N = 0, K = 0;
  int64_t k_tiles = 0, row_blocks = 0;
  int max_splits = 1;                  // what the workspace holds (chosen at upload for this N, K)

  size_t weight_bytes() const;  // packed + row_factor (+ bias): what one matmul reads of W
};

// Uploads an fp6/fp5 weight (synchronously; not for use inside a graph capture). Throws
// Error for other formats, for act other than F16/BF16 and for an (ebits, mbits) the
// activation type cannot hold (fp16: 1 + ebits + mbits <= 8 with ebits <= 5; instantiated:
// e3m2 and e2m2).
FpxDeviceWeight upload_fpx_weight(const PackedWeight& w, DType act);
void free_fpx_weight(FpxDeviceWeight* w);  // frees and clears; safe on an empty weight
// The device buffers of an N x K weight of `format` (packed, row_factor, split-K workspace;
// no bias), contents undefined: what upload_fpx_weight fills, and what the benchmarks fill
// with random bits.
FpxDeviceWeight alloc_fpx_weight(const WeightFormat& format, int64_t N, int64_t K, DType act);

// The largest M at which QuantLinear sends fp6/fp5 here where the tiled kernel serves the
// weight (compute capability 9.0, K % 8 == 0); above it, and above kFpxMaxM elsewhere, the
// transient dense copy (dequant_fpx) + cuBLAS. Measured up to here (H100, fp16, same run,
// kernels/fpx/BENCH.md, the fifteenth session's table): against the dense copy + cuBLAS
// the wide shape is 1.03-3.33x faster at M = 128, 1.17-1.78x at M = 256 (4096 x 1024, a GQA
// k/v alone, loses at every M) and 0.76-1.19x at M = 512, where the K = 4096 shapes lose
// (the sixteenth session's: 0.70-1.19x, the K = 4096 shapes 0.70-0.90x); llama2-7b fp6 pp512 (chunks
// of 512) 24.0k -> 24.5k tok/s with it, and no dense copy of the weights. Not measured
// beyond 512 (prompt chunks are 512 by default).
constexpr int kFpxTiledMaxM = 512;

// QuantLinear's switch for this weight: kFpxTiledMaxM or kFpxMaxM (above).
int gemm_fpx_max_m(const FpxDeviceWeight& w);

// Launch tuning; 0 = the automatic choice (what the benchmarks measured best): the register
// kernel's overrides (warps_k, splits, m_tile, tiles_ahead; kernels/fpx/fpx_launch.h) and
// which kernel runs. `splits` also sets the tiled kernel's cluster size (a power of two <= 8).
struct GemmFpxConfig : FpxLaunchOverrides {
  int tiled = -1;   // the tiled kernel (W and x staged in shared memory; needs the scratch): -1 automatic,
                    // 0 never, 1 its narrow shape (32 / 64 x rows), 2 its wide shape (128 x rows, 128
                    // rows of W), 3 the wide shape with 256 rows of W; each when possible, with
                    // fpx_tiled_launch's cluster size unless `splits` is set (automatic with `splits`
                    // set: the shape fpx_tiled_launch picks for that cluster size)
};

// y [M, N] (act) = x [M, K] (act) · Wᵀ (+ bias), on `stream`; x and y device pointers, rows
// contiguous. Preconditions (checked, Error): M >= 1, act == w.act.
// With `norm`, x is the `scaled` of a producer of the fused RMSNorm and y is scaled by
// r_m = rsqrt(Σ_p sum_squares[m, p] / K + eps) before the bias (gemv_qn's QnPendingNorm;
// M <= kFpxMaxM and a config that keeps the register kernel with one chunk of x rows --
// the default does -- Error otherwise).
//
// `scratch` (scratch_bytes >= gemm_fpx_scratch_bytes(w, M), 16-byte aligned) takes a
// permuted copy of x for the tiled kernel, which runs by itself where gemm_fpx_runs_tiled
// says so (above kFpxMaxM on an H100); without it (null) such M run the register kernel. A scratch smaller than
// the launch's copy of x is an Error, not a write past its end.
void gemm_fpx(const FpxDeviceWeight& w, const void* x, void* y, int M, DType act, cudaStream_t stream,
              const GemmFpxConfig& config = {}, const QnPendingNorm* norm = nullptr, void* scratch = nullptr,
              size_t scratch_bytes = 0);
// Whether an automatic launch at M (no fused norm) runs the tiled kernel where given the
// scratch: above kFpxMaxM, and at M 9..16 on a wide weight (fpx_tiled_at_small_m), on a
// device that runs it.
bool gemm_fpx_runs_tiled(const FpxDeviceWeight& w, int M);
size_t gemm_fpx_scratch_bytes(const FpxDeviceWeight& w, int M);  // ceil(M / 128) * 128 * ceil(K / 128) * 256 where the tiled kernel runs, else 0

// The RMSNorm between blocks, fused as in gemv_qn_residual (kernels/qn/gemv_qn.h has the
// contract), for M <= kFpxMaxM (Error otherwise):
//   residual [M, N] += x · Wᵀ (+ bias)   (fp32 sum, rounded once to act)
//   scaled [M, N] = residual ∘ norm_weight   (act)
//   sum_squares [M, gemm_fpx_norm_parts(w)] = per row block of 16, Σ residual² (fp32)
// residual and scaled must not overlap x or each other. Without it fp6 decode ran a
// separate add + RMSNorm kernel twice a layer.
int64_t gemm_fpx_norm_parts(const FpxDeviceWeight& w);  // = ceil(N / 16)
void gemm_fpx_residual(const FpxDeviceWeight& w, const void* x, void* residual, const float* norm_weight,
                       void* scaled, float* sum_squares, int M, DType act, cudaStream_t stream);

}  // namespace gemlite
