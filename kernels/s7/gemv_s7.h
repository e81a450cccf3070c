#pragma once
// Fused dequantize + GEMV for s7 / s7gG weights (1:2-sparse 7-bit, kernels/s7/s7_format.h):
//   y [M, N] = x [M, K] · Wᵀ (+ bias), x and y fp16 or bf16, fp32 accumulation, M = 1..16.
//
// s7 runs on the qN kernel (kernels/qn/gemv_qn_kernel.cuh): its pair bytes are packed exactly as
// q8 codes, so the kernel reads them as 8-bit codes and builds, from pair byte J, the two
// 32-k blocks it covers (first elements k0, second elements k0 + 32): the 7-bit value is
// dequantized once and a sign-replicating byte permute of the position bit masks it into
// one block or the other (kept weights as in s7_row_decoder, dropped ones exactly +0).
// One byte per two weights and 4 bytes per 128 of scale/bias: exactly the bytes of
// q4g128. Measured (H100, fp16, M = 1, cold L2, 2026-11-22; bench lines "gemv s7 ..."):
// 8192 x 57344 s7 109.3 us (76.5 % of copy) vs q4g128 107.0 us (78.1 %); 8192^2 20.2 vs
// 19.5 us; 28672 x 8192 58.0 vs 55.9 us; bf16 within 1-2 % of those: 2-4 % slower than
// the A16 kernel of the same bytes (one permute + one lop3 more per pair of weights),
// short of the "at least as fast".
#include <string>

#include "kernels/qn/gemv_qn.h"
#include "kernels/weight_format.h"
#include "runtime/error.h"

namespace gemlite {

// An s7 weight on the device: the same struct as qN, with sparse = true.
using S7DeviceWeight = QnDeviceWeight;

// Uploads an s7 / s7gG weight (synchronously). Throws Error for other formats and for
// activation types other than F16/BF16.
inline S7DeviceWeight upload_s7_weight(const PackedWeight& w, DType act) {
  if (w.format.kind != FormatKind::S7) throw Error("upload_s7_weight: " + w.format.name() + " is not s7");
  return upload_qn_weight(w, act);
}

// y [M, N] (act) = x [M, K] (act) · Wᵀ (+ bias) on `stream`; the contract of gemv_qn.
inline void gemv_s7(const S7DeviceWeight& w, const void* x, void* y, int M, DType act, cudaStream_t stream) {
  if (!w.sparse) throw Error("gemv_s7: the weight is not s7");
  gemv_qn(w, x, y, M, act, stream);
}

}  // namespace gemlite
