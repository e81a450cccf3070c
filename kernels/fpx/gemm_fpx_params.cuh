#pragma once
// The parameters both gemm_fpx kernels take (gemm_fpx_register.cuh, gemm_fpx_tiled.cuh);
// included by kernels/fpx/gemm_fpx.cu only.
#include <cstdint>

#include "kernels/qn/gemv_qn.h"  // QnPendingNorm

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

}  // namespace
}  // namespace gemlite
