#pragma once
// The dense copy of a qN / qNgG weight, made on the device from what gemv_qn reads, for
// the cuBLAS path of large M (prefill). Transient: the CUDA linear dequantizes into a
// scratch buffer shared by all layers before each large-M GEMM, so a 4-bit model keeps
// 4-bit weights in memory (a persistent fp16 copy made Llama-2-7B q4g64 3.5 -> 16 GiB).
#include <cuda_runtime.h>

#include "kernels/qn/gemv_qn.h"

namespace gemlite {

// out [N, K] (w.act: fp16 or bf16) = q * scale + (-zero * scale) from gemv_qn's own stored
// scale and -zero * scale (rounded to the activation type): an fp32 fma, then one rounding
// to the activation type (gemv_qn's half2 fma rounds once from the exact value, so the two
// may differ by an ulp). s7 (w.sparse): the kept element of each pair so, the other 0.
// On `stream`, graph-safe.
void dequant_qn(const QnDeviceWeight& w, void* out, cudaStream_t stream);

}  // namespace gemlite
