#include "kernels/qn/dequant_qn.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/qn/qn_format.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

__device__ __forceinline__ float bits_to_float(uint16_t bits, __half) { return __half2float(__ushort_as_half(bits)); }
__device__ __forceinline__ float bits_to_float(uint16_t bits, __nv_bfloat16) {
  return __bfloat162float(__ushort_as_bfloat16(bits));
}
__device__ __forceinline__ __half from_float(float v, __half) { return __float2half_rn(v); }
__device__ __forceinline__ __nv_bfloat16 from_float(float v, __nv_bfloat16) { return __float2bfloat16_rn(v); }

// One thread per 8 consecutive words of a tile (grid-stride over N * Kw / 8): word (tile,
// lane) of row n holds the codes of k = (tile * codes_per_word + j) * 32 + lane, so lanes
// 8o..8o+7 hold 8 consecutive k for every j, in one group (groups are multiples of 32):
// two 16-byte loads, then per j one scale/bias pair and one 16-byte store of 8 weights.
// Rows whose start is not 16-byte aligned (K % 8 != 0) and the last tile's k >= K take
// the scalar store. Each word is read once, each weight written once.
// (Measured on H100 for Llama-2-7B q4g64, pp512 with the dense copy made per GEMM: one
// thread per weight with 64-bit index divisions 262 us for 4096 x 4096; one thread per
// word with 2-byte stores gave 17.7k tok/s; see the README for this version.)
template <typename Act>
__global__ void dequant_qn_kernel(const uint32_t* qweight, const uint32_t* scale_bias, int64_t N, int64_t K,
                                  int64_t Kw, int bits, int group_shift, int64_t n_groups, Act* out) {
  const int codes_per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const int64_t N16 = (N + 15) / 16 * 16, octets_per_row = Kw / 8;  // Kw is a multiple of 32
  const bool aligned_rows = K % 8 == 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N * octets_per_row;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / octets_per_row, octet = i % octets_per_row;
    const int64_t tile = octet / 4, lane0 = octet % 4 * 8;
    uint32_t words[8];
    const uint4* source = reinterpret_cast<const uint4*>(qweight + n * Kw + octet * 8);
    *reinterpret_cast<uint4*>(words) = source[0];
    *reinterpret_cast<uint4*>(words + 4) = source[1];
    const int64_t pair_row = n / 16 * 16 + n % 8 * 2 + n % 16 / 8;  // see QnDeviceWeight::scale_bias
    Act* row = out + n * K;
    for (int j = 0; j < codes_per_word; ++j) {
      const int64_t k0 = (tile * codes_per_word + j) * kWarpLanes + lane0;
      if (k0 >= K) break;
      const int64_t group = min((k0 / kWarpLanes) >> group_shift, n_groups - 1);
      const uint32_t pair = scale_bias[group * N16 + pair_row];
      const float scale = bits_to_float(uint16_t(pair & 0xffffu), Act{});
      const float bias = bits_to_float(uint16_t(pair >> 16), Act{});
      const int shift = 32 - bits * (j + 1);
      Act values[8];
#pragma unroll
      for (int l = 0; l < 8; ++l) values[l] = from_float(fmaf(float(words[l] >> shift & mask), scale, bias), Act{});
      if (aligned_rows && k0 + 8 <= K) {
        *reinterpret_cast<uint4*>(row + k0) = *reinterpret_cast<const uint4*>(values);
      } else {
        for (int l = 0; l < 8 && k0 + l < K; ++l) row[k0 + l] = values[l];
      }
    }
  }
}

}  // namespace

void dequant_qn(const QnDeviceWeight& w, void* out, cudaStream_t stream) {
  if (w.sparse || w.bits < 1 || w.bits > 8)
    throw Error("dequant_qn: " + std::string(w.sparse ? "s7" : std::to_string(w.bits) + "-bit") +
                " weights (qN, N = 1..8, only)");
  if (w.Kw % kWarpLanes != 0) throw Error("dequant_qn: " + std::to_string(w.Kw) + " words per row (whole tiles expected)");
  const int64_t octets = w.N * w.Kw / 8;
  const unsigned blocks = unsigned(std::min<int64_t>((octets + 255) / 256, 65536));
  if (w.act == DType::BF16) {
    dequant_qn_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(w.qweight, w.scale_bias, w.N, w.K, w.Kw, w.bits,
                                                                 w.group_shift, w.n_groups,
                                                                 static_cast<__nv_bfloat16*>(out));
  } else {
    dequant_qn_kernel<__half><<<blocks, 256, 0, stream>>>(w.qweight, w.scale_bias, w.N, w.K, w.Kw, w.bits,
                                                          w.group_shift, w.n_groups, static_cast<__half*>(out));
  }
  CHECK_LAST_LAUNCH("dequant_qn_kernel");
}

}  // namespace gemlite
