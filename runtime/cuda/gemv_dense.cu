// Dense GEMV for decode: y [M, N] = x [M, K] · Wᵀ (+ bias), W [N, K] fp16/bf16 row-major,
// M = 1..8. Serves the dense formats (f16/bf16/f32 checkpoints) at batch 1-8 instead of
// cuBLAS (packed formats have their own kernels, see cuda_linear.cu), which moves only
// ~1.1 TB/s (36 % of copy) on 4096x4096 fp16 at M = 1 (docs/PERF.md) and made decode of
// dense formats slower than qN.
//
// One warp per output row: each lane streams 16-byte chunks of the row (8 weights), four
// in flight (loads first, math after), multiplies them with the M rows of x (L1/L2-resident)
// in fp32 and the warp reduces with shuffles. Rows whose K is not a multiple of 8, or
// pointers not 16-byte aligned, take a scalar loop instead.
#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/pdl.cuh"
#include "kernels/qn/gemv_qn.h"
#include "runtime/cuda/act_type.cuh"
#include "runtime/cuda/ops.h"

namespace gemlite {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kInFlight = 4;  // 16-byte loads of W per lane before the math

// acc[m] += dot(8 weights in w, 8 activations of row m of x at chunk c)
template <typename Act>
__device__ __forceinline__ void fma_chunk(const uint4& w, const Act* x, int64_t K, int64_t c, int M, float* acc) {
  using Pair = typename PairOf<Act>::type;
  const Pair* wp = reinterpret_cast<const Pair*>(&w);
  float2 wf[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) wf[i] = to_float2(wp[i]);
#pragma unroll
  for (int m = 0; m < kGemvMaxM; ++m) {
    if (m >= M) break;
    const uint4 xv = *(reinterpret_cast<const uint4*>(x + m * K) + c);
    const Pair* xp = reinterpret_cast<const Pair*>(&xv);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 xf = to_float2(xp[i]);
      acc[m] = fmaf(wf[i].x, xf.x, acc[m]);
      acc[m] = fmaf(wf[i].y, xf.y, acc[m]);
    }
  }
}

// PRECOND: blockDim.x = 32 * kWarpsPerBlock; vectorized => K % 8 == 0 and W, x 16-byte aligned.
// The fused RMSNorm (DenseGemvNorm, as gemv_qn's, see gemv_qn.h): a pending norm scales
// the outputs; a residual output adds them to the residual stream, writes y = residual ∘
// norm_weight and per block of 8 rows the sum of the residual's squares.
template <typename Act>
__global__ void gemv_dense_kernel(const Act* W, const Act* x, const float* bias, Act* y, int M, int64_t N,
                                  int64_t K, bool vectorized, DenseGemvNorm norm) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t n = int64_t(blockIdx.x) * kWarpsPerBlock + warp;
  const bool live = n < N;  // no early return: the norm's epilogue synchronises the block
  // PDL (kernels/pdl.cuh): launched while the kernel before it runs; the next kernel may
  // start as soon as all blocks run. Loading the first round of W before the wait (as
  // gemv_qn does its first tile) measured slower: tinyllama-1.1b f16 tg128 840.3 / 843.1 ->
  // 833.5 / 834.3 tok/s (same-machine A/B, 2026-11-25).
  pdl_launch_dependents();
  pdl_wait();
  const Act* row = W + (live ? n : 0) * K;  // [K]
  float acc[kGemvMaxM] = {};
  if (!live) {
  } else if (vectorized) {
    const uint4* chunks = reinterpret_cast<const uint4*>(row);  // [K / 8]
    const int64_t n_chunks = K / 8;
    int64_t c = lane;
    for (; c + 32 * (kInFlight - 1) < n_chunks; c += 32 * kInFlight) {
      uint4 w[kInFlight];
#pragma unroll
      for (int i = 0; i < kInFlight; ++i) w[i] = __ldg(chunks + c + 32 * i);
#pragma unroll
      for (int i = 0; i < kInFlight; ++i) fma_chunk(w[i], x, K, c + 32 * i, M, acc);
    }
    for (; c < n_chunks; c += 32) fma_chunk(__ldg(chunks + c), x, K, c, M, acc);
  } else {
    for (int64_t k = lane; k < K; k += 32) {
      const float w = to_float(row[k]);
      for (int m = 0; m < M; ++m) acc[m] = fmaf(w, to_float(x[m * K + k]), acc[m]);
    }
  }
  __shared__ float inv_rms[kGemvMaxM];
  if (norm.pending_sum_squares) {  // one warp sums the parts in a fixed order
    if (warp == 0) {
      for (int m = 0; m < M; ++m) {
        const float r = pending_inv_rms(norm.pending_sum_squares + int64_t(m) * norm.pending_parts, norm.pending_parts,
                                        int(K), norm.eps);
        if (lane == 0) inv_rms[m] = r;
      }
    }
    __syncthreads();
  }
  __shared__ float squares[kGemvMaxM][kWarpsPerBlock];
#pragma unroll
  for (int m = 0; m < kGemvMaxM; ++m) {
    if (m >= M) break;
    float sum = acc[m];
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane != 0) continue;
    if (norm.pending_sum_squares) sum *= inv_rms[m];
    if (live && bias) sum += bias[n];
    if (!norm.residual) {
      if (live) y[m * N + n] = from_float<Act>(sum);
      continue;
    }
    float square = 0;
    if (live) {
      Act* residual = static_cast<Act*>(norm.residual);
      const Act total = from_float<Act>(to_float(residual[m * N + n]) + sum);
      residual[m * N + n] = total;
      const float v = to_float(total);
      y[m * N + n] = from_float<Act>(v * norm.norm_weight[n]);
      square = v * v;
    }
    squares[m][warp] = square;
  }
  if (norm.residual) {
    __syncthreads();
    if (threadIdx.x < M) {
      float sum = 0;
      for (int w = 0; w < kWarpsPerBlock; ++w) sum += squares[threadIdx.x][w];
      norm.sum_squares[int64_t(threadIdx.x) * gridDim.x + blockIdx.x] = sum;
    }
  }
}

}  // namespace

int64_t gemv_dense_blocks(int64_t N) { return (N + kWarpsPerBlock - 1) / kWarpsPerBlock; }

void launch_gemv_dense(const void* W, const void* x, const float* bias, void* y, int M, int64_t N, int64_t K,
                       DType act, cudaStream_t stream, const DenseGemvNorm& norm) {
  if (norm.pending_sum_squares && (norm.pending_parts < 1 || !(norm.eps >= 0)))
    throw Error("gemv_dense: a pending norm of " + std::to_string(norm.pending_parts) + " parts");
  if (norm.residual && (!norm.norm_weight || !norm.sum_squares))
    throw Error("gemv_dense: a residual output needs the norm weight and the sum of squares");
  if (M < 1 || M > kGemvMaxM)
    throw Error("gemv_dense: M = " + std::to_string(M) + " (expected 1.." + std::to_string(kGemvMaxM) + ")");
  const bool vectorized =
      K % 8 == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const unsigned blocks = unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  dispatch_act(act, "gemv_dense", [&](auto tag) {
    using Act = decltype(tag);
    launch_pdl("gemv_dense_kernel", gemv_dense_kernel<Act>, dim3(blocks), dim3(32 * kWarpsPerBlock), 0, stream,
               static_cast<const Act*>(W), static_cast<const Act*>(x), bias, static_cast<Act*>(y), M, N, K,
               vectorized, norm);
  });
}

}  // namespace gemlite
