// The backend's elementwise and per-row kernels. Simple on purpose: one thread per element
// (grid-stride) or one block per row, fp32 math, matching runtime/cpu/cpu_backend.cpp.
#include "runtime/cuda/ops.h"

#include <algorithm>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/pdl.cuh"
#include "runtime/cuda/act_type.cuh"

namespace gemlite {
namespace {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements; the cap keeps the grid small for huge n.
unsigned grid_for(int64_t n) { return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 4096))); }

// The per-row kernels run one row at decode, where their time is memory latency, not
// bandwidth: a thread that loads, waits and stores element after element pays the latency
// each time (the compiler may not move a load above a store that could alias it). So
// every thread issues all its loads before its first store. A 256-thread block looping
// over a 4096-wide row took 12.2 us per add + RMSNorm at Llama-2-7B decode (ncu, H100).

// PRECOND: grid (T, ceil(dim / blockDim.x)), table_dtype F32/F16/BF16 (checked by the launcher).
template <typename Act>
__global__ void embed_kernel(const void* table, DType table_dtype, const int* ids, int64_t dim, Act* out) {
  pdl_launch_dependents();  // a PDL successor (the GEMVs) may start now (kernels/pdl.cuh)
  pdl_wait();
  const int64_t i = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (i >= dim) return;
  const int64_t at = int64_t(ids[blockIdx.x]) * dim + i;
  float v;
  if (table_dtype == DType::F32) v = static_cast<const float*>(table)[at];
  else if (table_dtype == DType::F16) v = to_float(static_cast<const __half*>(table)[at]);
  else v = to_float(static_cast<const __nv_bfloat16*>(table)[at]);
  out[blockIdx.x * dim + i] = from_float<Act>(v);
}

constexpr int kNormThreads = 1024;

// With y: x += y (rounded to Act, as stored), then out = x / rms(x) * weight; without y:
// out = rmsnorm(x). fp32 math. A thread holds PER_THREAD chunks of VEC consecutive
// elements (chunk c = threadIdx.x + j blockDim.x: elements VEC c .. VEC c + VEC - 1) in
// registers from the loads to the last store, so out may alias x or y.
// PRECOND: grid.x = T, blockDim.x a multiple of 32 <= kNormThreads, d <= blockDim.x *
// PER_THREAD * VEC; VEC = 8: d % 8 == 0 and x, y, out, weight 16-byte aligned.
template <typename Act, int PER_THREAD, int VEC>
__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(Act* x, const Act* y, const float* weight, float eps,
                                                               int64_t d, Act* out) {
  pdl_launch_dependents();  // a PDL successor (the GEMVs) may start now (kernels/pdl.cuh)
  // The norm's weights do not depend on the kernel before: fetched while it finishes.
  float g[PER_THREAD][VEC];
#pragma unroll
  for (int j = 0; j < PER_THREAD; ++j) {
    const int64_t i = (threadIdx.x + int64_t(j) * blockDim.x) * VEC;
#pragma unroll
    for (int e = 0; e < VEC; ++e) g[j][e] = i < d ? weight[i + e] : 0.0f;
  }
  pdl_wait();
  Act* row = x + blockIdx.x * d;                      // [d]
  const Act* add = y ? y + blockIdx.x * d : nullptr;  // [d] or null
  Act* dst = out + blockIdx.x * d;                    // [d]
  float v[PER_THREAD][VEC] = {};
#pragma unroll
  for (int j = 0; j < PER_THREAD; ++j) {
    const int64_t i = (threadIdx.x + int64_t(j) * blockDim.x) * VEC;
    if (i >= d) continue;
    load_act<Act, VEC>(row + i, v[j]);
    if (add) {
      float w[VEC];
      load_act<Act, VEC>(add + i, w);
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[j][e] += w[e];
    }
  }
  float sum_squares = 0;
#pragma unroll
  for (int j = 0; j < PER_THREAD; ++j) {
    const int64_t i = (threadIdx.x + int64_t(j) * blockDim.x) * VEC;
    if (add && i < d) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[j][e] = to_float(from_float<Act>(v[j][e]));  // the sum as stored
      store_act<Act, VEC>(row + i, v[j]);
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) sum_squares += v[j][e] * v[j][e];  // 0 past d
  }
  sum_squares = block_reduce(sum_squares, SumOp{});
  const float inv_rms = rsqrtf(sum_squares / float(d) + eps);
#pragma unroll
  for (int j = 0; j < PER_THREAD; ++j) {
    const int64_t i = (threadIdx.x + int64_t(j) * blockDim.x) * VEC;
    if (i >= d) continue;
#pragma unroll
    for (int e = 0; e < VEC; ++e) v[j][e] *= inv_rms * g[j][e];
    store_act<Act, VEC>(dst + i, v[j]);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Rows of many tokens (a prefill chunk) take a quarter of the threads a row, 4 chunks each,
// so that a chunk's rows fit one wave of blocks.
constexpr int64_t kNormManyRows = 64;

// The rmsnorm_kernel for rows of d elements, up to kMaxNormDim: 16-byte chunks where the
// row allows (d % 8 == 0, aligned), one element at a time elsewhere. Measured (H200,
// llama2-7b fp6 512-token prefill, ncu): the element-at-a-time kernel with 1024 threads a
// row took 14.6 us per add + RMSNorm of 512 x 4096. With the rest of this change the
// 512-token step ran 8-12 % faster (runtime/cuda/MEASURED.md, twenty-fourth session).
template <typename Act>
void launch_rmsnorm_kernel(Act* x, const Act* y, const float* weight, float eps, int64_t T, int64_t d, Act* out,
                           cudaStream_t stream) {
  if (d < 1 || d > kMaxNormDim)
    throw Error("cuda rmsnorm: rows of " + std::to_string(d) + " elements (1 .. " + std::to_string(kMaxNormDim) +
                " supported)");
  static_assert(kMaxNormDim == kNormThreads * 32, "the largest instance below must cover kMaxNormDim");
  const auto launch = [&](auto kernel, int64_t threads) {
    launch_pdl("rmsnorm_kernel", kernel, dim3(unsigned(T)), dim3(unsigned((threads + 31) / 32 * 32)), 0, stream, x,
               y, weight, eps, d, out);
  };
  if (d % 8 == 0 && aligned16(x) && (!y || aligned16(y)) && aligned16(out) && aligned16(weight)) {
    const int64_t chunks = d / 8;  // <= 4096
    if (T < kNormManyRows && chunks <= kNormThreads)
      launch(rmsnorm_kernel<Act, 1, 8>, chunks);
    else
      launch(rmsnorm_kernel<Act, 4, 8>, (chunks + 3) / 4);
  } else if (d <= kNormThreads * 2) {
    launch(rmsnorm_kernel<Act, 2, 1>, kNormThreads);
  } else if (d <= kNormThreads * 8) {
    launch(rmsnorm_kernel<Act, 8, 1>, kNormThreads);
  } else {
    launch(rmsnorm_kernel<Act, 32, 1>, kNormThreads);
  }
}

// out [T, h] = silu(gate) * up of gate_up [T, 2h] (gate, then up, per row): a block
// covers kThreads * VEC columns of rows blockIdx.y, + gridDim.y, ... -- no division per
// element (the grid-stride version's 64-bit i / h and i % h took 25 us for 512 x 11008 at
// Llama-2-7B prefill, H200, ncu). PRECOND: VEC = 8: h % 8 == 0 and both 16-byte aligned.
template <typename Act, int VEC>
__global__ void silu_mul_kernel(const Act* gate_up, int64_t T, int64_t h, Act* out) {
  pdl_launch_dependents();  // a PDL successor (the GEMVs) may start now (kernels/pdl.cuh)
  pdl_wait();
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (c >= h) return;
  for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
    float gate[VEC], up[VEC];
    load_act<Act, VEC>(gate_up + t * 2 * h + c, gate);
    load_act<Act, VEC>(gate_up + t * 2 * h + h + c, up);
#pragma unroll
    for (int e = 0; e < VEC; ++e) gate[e] = gate[e] / (1.0f + expf(-gate[e])) * up[e];
    store_act<Act, VEC>(out + t * h + c, gate);
  }
}

template <typename Act>
__global__ void add_bias_kernel(Act* y, const float* bias, int64_t n, int64_t N) {
  pdl_launch_dependents();  // a PDL successor (the GEMVs) may start now (kernels/pdl.cuh)
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_float<Act>(to_float(y[i]) + bias[i % N]);
}

template <typename Act>
__global__ void to_f32_kernel(const Act* x, float* out, int64_t n) {
  pdl_launch_dependents();  // a PDL successor (the GEMVs) may start now (kernels/pdl.cuh)
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_float(x[i]);
}

}  // namespace

void launch_embed(const void* table, DType table_dtype, const int* ids, int T, int64_t dim,
                  void* out, DType act, cudaStream_t stream) {
  if (table_dtype != DType::F32 && table_dtype != DType::F16 && table_dtype != DType::BF16)
    throw Error(std::string("cuda backend: embedding of type ") + dtype_name(table_dtype) +
                " (expected F32, F16 or BF16)");
  dispatch_act(act, "embed", [&](auto tag) {
    using Act = decltype(tag);
    launch_pdl("embed_kernel", embed_kernel<Act>, dim3(unsigned(T), unsigned((dim + kThreads - 1) / kThreads)),
               dim3(kThreads), 0, stream, table, table_dtype, ids, dim, static_cast<Act*>(out));
  });
}

void launch_rmsnorm(const void* x, const float* weight, float eps, int64_t T, int64_t d, void* out,
                    DType act, cudaStream_t stream) {
  dispatch_act(act, "rmsnorm", [&](auto tag) {
    using Act = decltype(tag);
    // Without y the kernel only reads x.
    launch_rmsnorm_kernel<Act>(static_cast<Act*>(const_cast<void*>(x)), nullptr, weight, eps, T, d,
                               static_cast<Act*>(out), stream);
  });
}

void launch_add_rmsnorm(void* x, const void* y, const float* weight, float eps, int64_t T, int64_t d, void* out,
                        DType act, cudaStream_t stream) {
  dispatch_act(act, "add_rmsnorm", [&](auto tag) {
    using Act = decltype(tag);
    launch_rmsnorm_kernel<Act>(static_cast<Act*>(x), static_cast<const Act*>(y), weight, eps, T, d,
                               static_cast<Act*>(out), stream);
  });
}

void launch_silu_mul(const void* gate_up, int64_t T, int64_t h, void* out, DType act, cudaStream_t stream) {
  const unsigned rows = unsigned(std::min<int64_t>(T, 65535));
  const bool vectors = h % 8 == 0 && aligned16(gate_up) && aligned16(out);
  dispatch_act(act, "silu_mul", [&](auto tag) {
    using Act = decltype(tag);
    const auto launch = [&](auto kernel, int vec) {
      const dim3 grid(unsigned((h + int64_t(kThreads) * vec - 1) / (int64_t(kThreads) * vec)), rows);
      launch_pdl("silu_mul_kernel", kernel, grid, dim3(kThreads), 0, stream, static_cast<const Act*>(gate_up), T, h,
                 static_cast<Act*>(out));
    };
    if (vectors) {
      launch(silu_mul_kernel<Act, 8>, 8);
    } else {
      launch(silu_mul_kernel<Act, 1>, 1);
    }
  });
}

void launch_add_bias(void* y, const float* bias, int64_t M, int64_t N, DType act, cudaStream_t stream) {
  dispatch_act(act, "add_bias", [&](auto tag) {
    using Act = decltype(tag);
    launch_pdl("add_bias_kernel", add_bias_kernel<Act>, dim3(grid_for(M * N)), dim3(kThreads), 0, stream,
               static_cast<Act*>(y), bias, M * N, N);
  });
}

void launch_to_f32(const void* x, float* out, int64_t n, DType act, cudaStream_t stream) {
  dispatch_act(act, "to_f32", [&](auto tag) {
    using Act = decltype(tag);
    launch_pdl("to_f32_kernel", to_f32_kernel<Act>, dim3(grid_for(n)), dim3(kThreads), 0, stream,
               static_cast<const Act*>(x), out, n);
  });
}

}  // namespace gemlite
