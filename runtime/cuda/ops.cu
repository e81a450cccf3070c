// The backend's elementwise and per-row kernels. Simple on purpose: one thread per element
// (grid-stride) or one block per row, fp32 math, matching runtime/cpu/cpu_backend.cpp.
#include "runtime/cuda/ops.h"

#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/pdl.cuh"
#include "runtime/cuda/act_type.cuh"

namespace gemlite {
namespace {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements; the cap keeps the grid small for huge n.
unsigned grid_for(int64_t n) { return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 4096))); }

// PRECOND: grid.x = T, table_dtype F32/F16/BF16 (checked by the launcher).
template <typename Act>
__global__ void embed_kernel(const void* table, DType table_dtype, const int* ids, int64_t dim, Act* out) {
  pdl_launch_dependents();
  const int64_t row = ids[blockIdx.x];
  Act* dst = out + blockIdx.x * dim;                   // [dim]
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const int64_t at = row * dim + i;
    float v;
    if (table_dtype == DType::F32) v = static_cast<const float*>(table)[at];
    else if (table_dtype == DType::F16) v = to_float(static_cast<const __half*>(table)[at]);
    else v = to_float(static_cast<const __nv_bfloat16*>(table)[at]);
    dst[i] = from_float<Act>(v);
  }
}

// PRECOND: grid.x = T, blockDim.x = kThreads.
template <typename Act>
__global__ void rmsnorm_kernel(const Act* x, const float* weight, float eps, int64_t d, Act* out) {
  pdl_launch_dependents();
  const Act* row = x + blockIdx.x * d;  // [d]
  Act* dst = out + blockIdx.x * d;      // [d]
  float sum_squares = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = to_float(row[i]);
    sum_squares += v * v;
  }
  sum_squares = block_reduce(sum_squares, SumOp{});
  const float inv_rms = rsqrtf(sum_squares / float(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    dst[i] = from_float<Act>(to_float(row[i]) * inv_rms * weight[i]);
}

// x += y, then out = rmsnorm(x). Each element is read and written by the same thread in
// both passes, so out may alias y. PRECOND: grid.x = T, blockDim.x = kThreads.
template <typename Act>
__global__ void add_rmsnorm_kernel(Act* x, const Act* y, const float* weight, float eps, int64_t d, Act* out) {
  pdl_launch_dependents();
  Act* row = x + blockIdx.x * d;           // [d]
  const Act* add = y + blockIdx.x * d;     // [d]
  Act* dst = out + blockIdx.x * d;         // [d]
  float sum_squares = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const Act sum = from_float<Act>(to_float(row[i]) + to_float(add[i]));  // rounded as stored
    row[i] = sum;
    const float v = to_float(sum);
    sum_squares += v * v;
  }
  sum_squares = block_reduce(sum_squares, SumOp{});
  const float inv_rms = rsqrtf(sum_squares / float(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    dst[i] = from_float<Act>(to_float(row[i]) * inv_rms * weight[i]);
}

template <typename Act>
__global__ void silu_mul_kernel(Act* gate, const Act* up, int64_t n) {
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = to_float(gate[i]);
    gate[i] = from_float<Act>(g / (1.0f + expf(-g)) * to_float(up[i]));
  }
}

template <typename Act>
__global__ void add_bias_kernel(Act* y, const float* bias, int64_t n, int64_t N) {
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_float<Act>(to_float(y[i]) + bias[i % N]);
}

template <typename Act>
__global__ void to_f32_kernel(const Act* x, float* out, int64_t n) {
  pdl_launch_dependents();
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
    embed_kernel<Act><<<T, kThreads, 0, stream>>>(table, table_dtype, ids, dim, static_cast<Act*>(out));
    CHECK_LAST_LAUNCH("embed_kernel");
  });
}

void launch_rmsnorm(const void* x, const float* weight, float eps, int64_t T, int64_t d, void* out,
                    DType act, cudaStream_t stream) {
  dispatch_act(act, "rmsnorm", [&](auto tag) {
    using Act = decltype(tag);
    rmsnorm_kernel<Act><<<unsigned(T), kThreads, 0, stream>>>(static_cast<const Act*>(x), weight, eps, d,
                                                             static_cast<Act*>(out));
    CHECK_LAST_LAUNCH("rmsnorm_kernel");
  });
}

void launch_silu_mul(void* gate, const void* up, int64_t n, DType act, cudaStream_t stream) {
  dispatch_act(act, "silu_mul", [&](auto tag) {
    using Act = decltype(tag);
    silu_mul_kernel<Act><<<grid_for(n), kThreads, 0, stream>>>(static_cast<Act*>(gate), static_cast<const Act*>(up), n);
    CHECK_LAST_LAUNCH("silu_mul_kernel");
  });
}

void launch_add_rmsnorm(void* x, const void* y, const float* weight, float eps, int64_t T, int64_t d, void* out,
                        DType act, cudaStream_t stream) {
  dispatch_act(act, "add_rmsnorm", [&](auto tag) {
    using Act = decltype(tag);
    add_rmsnorm_kernel<Act><<<unsigned(T), kThreads, 0, stream>>>(static_cast<Act*>(x), static_cast<const Act*>(y),
                                                                 weight, eps, d, static_cast<Act*>(out));
    CHECK_LAST_LAUNCH("add_rmsnorm_kernel");
  });
}

void launch_add_bias(void* y, const float* bias, int64_t M, int64_t N, DType act, cudaStream_t stream) {
  dispatch_act(act, "add_bias", [&](auto tag) {
    using Act = decltype(tag);
    add_bias_kernel<Act><<<grid_for(M * N), kThreads, 0, stream>>>(static_cast<Act*>(y), bias, M * N, N);
    CHECK_LAST_LAUNCH("add_bias_kernel");
  });
}

void launch_to_f32(const void* x, float* out, int64_t n, DType act, cudaStream_t stream) {
  dispatch_act(act, "to_f32", [&](auto tag) {
    using Act = decltype(tag);
    to_f32_kernel<Act><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const Act*>(x), out, n);
    CHECK_LAST_LAUNCH("to_f32_kernel");
  });
}

}  // namespace gemlite
