// qN / qNgG -> a dense fp16/bf16 copy of W on the device, for the cuBLAS path of large M
// (prefill). Replaces a host loop over the CPU decoder (one pass over every weight on one
// core, then a full-size upload): the packed weight is already on the device for gemv_qn.
// Same formula, in the same fp32 order, as qn_row_decoder (kernels/qn/qn_format.cpp), so
// the dense copy is bitwise what the host loop made.
#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/qn/qn_format.h"
#include "runtime/cuda/act_type.cuh"
#include "runtime/cuda/ops.h"

namespace gemlite {
namespace {

// One thread per weight, grid-stride over N * K: consecutive threads take consecutive k,
// which are consecutive words of a tile (reads and writes coalesce).
template <typename Act>
__global__ void dequant_qn_kernel(const uint32_t* qweight, const __half* scales, const __half* zeros, int64_t N,
                                  int64_t K, int64_t Kw, int bits, int64_t group_size, int64_t n_groups, Act* out) {
  const int codes_per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const int64_t per_tile = int64_t(kWarpLanes) * codes_per_word;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N * K; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / K, k = i % K;
    const int64_t tile = k / per_tile, within = k % per_tile;
    const int j = int(within / kWarpLanes), lane = int(within % kWarpLanes);
    const uint32_t word = qweight[n * Kw + tile * kWarpLanes + lane];
    const int64_t group = n * n_groups + k / group_size;
    const float q = float(int32_t(word >> (32 - bits * (j + 1)) & mask));
    out[i] = from_float<Act>((q - __half2float(zeros[group])) * __half2float(scales[group]));
  }
}

}  // namespace

void launch_dequant_qn(const uint32_t* qweight, const uint16_t* scales, const uint16_t* zeros, int64_t N, int64_t K,
                       int bits, int64_t group_size, void* out, DType act, cudaStream_t stream) {
  const int64_t Kw = qn_words_per_row(K, bits);
  const int64_t n_groups = (K + group_size - 1) / group_size;
  const int64_t blocks = std::min<int64_t>((N * K + 255) / 256, 65536);
  dispatch_act(act, "dequant_qn", [&](auto tag) {
    using Act = decltype(tag);
    dequant_qn_kernel<Act><<<unsigned(blocks), 256, 0, stream>>>(
        qweight, reinterpret_cast<const __half*>(scales), reinterpret_cast<const __half*>(zeros), N, K, Kw, bits,
        group_size, n_groups, static_cast<Act*>(out));
    CHECK_LAST_LAUNCH("dequant_qn_kernel");
  });
}

}  // namespace gemlite
