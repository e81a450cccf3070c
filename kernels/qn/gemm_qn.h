#pragma once
// The qN matmul for prompt chunks on an H100: y [M, N] = x [M, K] · Wᵀ (+ bias) on tensor
// cores (wgmma), reading the packed weight of gemv_qn (QnDeviceWeight, its 2 KB tiles and
// scale/bias pairs) once per chunk of x rows and dequantizing it in registers, where the
// fallback writes a dense fp16 copy of W for cuBLAS first (dequant_qn). The kernel is
// kernels/qn/gemm_qn_tiled.cuh. Asynchronous on the caller's stream, graph-capturable.
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/qn/gemv_qn.h"
#include "runtime/dtype.h"

namespace gemlite {

// Whether gemm_qn serves this weight: 2..8-bit qN codes and s7 (not 1-bit, whose 1024-k
// tiles do not fit its stages), K % 8 == 0, on a device of compute capability 9.0 running
// the kernel's sm_90a code. Elsewhere QuantLinear keeps the GEMV slices or the dense copy +
// cuBLAS.
bool gemm_qn_runs(const QnDeviceWeight& w);

// Bytes of the scratch gemm_qn needs at M: x permuted into the kernel's image (chunks of
// its x rows, whole tiles of K). 0 where gemm_qn does not run.
size_t gemm_qn_scratch_bytes(const QnDeviceWeight& w, int M);

// The most rows QuantLinear gives gemm_qn (above, the dense copy + cuBLAS): 512 -- every
// prompt chunk -- where blocks of 8 warps may take 128 x rows (qn_tiled_wide_fits: 3..6
// bits, s7), else 256 (kernels/qn/gemm_qn.cu has the measurements).
int gemm_qn_max_m(const QnDeviceWeight& w);

// Launch overrides, 0 = automatic: warps (row blocks of W a block, 8 or 16; 16 not at 2
// bits), rows_x (x rows a block: qn_tiled_rows_x, or 128 with 8 warps at 3..6 bits and
// s7; kernels/qn/qn_launch.h) and splits (blocks of a cluster splitting K: 1, 2, 4 or 8).
// A shape that does not exist at the weight's width is an Error.
struct GemmQnConfig {
  int warps = 0;
  int rows_x = 0;
  int splits = 0;
};

// Whether the launch overrides of `config` name a block shape that exists for this weight
// (gemm_qn throws for one that does not).
bool gemm_qn_has_shape(const QnDeviceWeight& w, const GemmQnConfig& config);

// y [M, N] (act) = x [M, K] (act) · Wᵀ (+ bias), W in stored-row order (a SwiGLU pair's y
// is [gate; up] as gemv_qn writes it). `scratch` (16-byte aligned, >= gemm_qn_scratch_bytes)
// takes the permuted x. PRECOND (Error): gemm_qn_runs(w), M >= 1, act == w.act, x 16-byte
// aligned, a large enough scratch.
void gemm_qn(const QnDeviceWeight& w, const void* x, void* y, int M, DType act, cudaStream_t stream, void* scratch,
             size_t scratch_bytes, const GemmQnConfig& config = {});

}  // namespace gemlite
