#pragma once
// The dense copy of an fp6 / fp5 weight, made on the device from what gemm_fpx reads, for
// the cuBLAS path of large M (prefill). Transient, as dequant_qn's: the CUDA linear writes
// it into a scratch buffer shared by all layers before each large-M GEMM, so an fp6 model
// keeps its 6-bit size in memory (the persistent fp16 copy made on the host before added
// 12.5 GiB to Llama-2-7B's 4.6 GiB of fp6 weights). llama2-7b fp6 pp512 on the H100:
// 24.1k tok/s (35.9k with the persistent copy, an earlier session).
#include <cuda_runtime.h>

#include "kernels/fpx/gemm_fpx.h"

namespace gemlite {

// out [N, K] (w.act: fp16 or bf16) = each code's value times its row's scale: an exact
// fp32 product rounded once to the activation type, so equal bit for bit to the host's
// row decoder (make_row_decoder) rounded the same way. On `stream`, graph-safe.
void dequant_fpx(const FpxDeviceWeight& w, void* out, cudaStream_t stream);

}  // namespace gemlite
