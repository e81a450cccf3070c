#pragma once
// Fused dequantize + GEMV for s7 / s7gG weights (1:2-sparse 7-bit, kernels/s7/s7_format.h):
//   y [M, N] = x [M, K] · Wᵀ (+ bias), x and y fp16 or bf16, fp32 accumulation, M = 1..8.
//
// s7 runs on the qN kernel (kernels/qn/gemv_qn.cu): its pair bytes are packed exactly as
// q8 codes, so the kernel reads them as 8-bit codes and builds, from pair byte J, the two
// 32-k blocks it covers (first elements k0, second elements k0 + 32): the 7-bit value is
// dequantized once and a sign-replicating byte permute of the position bit masks it into
// one block or the other (kept weights as in s7_row_decoder, dropped ones exactly +0).
// One byte per two weights, as q4: it moves the bytes of q4g128 and spends ~2 more
// instructions per byte (the mask), see the benchmark lines "gemv s7g64 / s7".
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
