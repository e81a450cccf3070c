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

// One thread per packed word (grid-stride over N * Kw): word (tile, lane) of row n holds
// the codes of k = (tile * codes_per_word + j) * 32 + lane, j = 0.., so for each j the 32
// lanes of a warp write 32 consecutive outputs and every word is read once.
// Measured (H100, Llama-2-7B q4g64 pp512, the dense copy made before every GEMM): the
// one-thread-per-weight kernel before it took 262 us for a 4096 x 4096 weight (ncu);
// with this one pp512 is 17.7k tok/s against 36.4k with a persistent dense copy, i.e. the
// copies cost ~16 ms of a 30 ms chunk, ~1 TB/s for 16.7 GB written and read. A version
// with 16-byte loads and stores of 8 weights per thread measured no faster (17.0k), so
// the stores are not what limits it; the 64-bit index arithmetic per word is the next
// suspect (not yet profiled).
// s7 (`sparse`, kernels/s7/s7_format.h): the word's 4 pair bytes, byte j covering k blocks
// 2j and 2j + 1 of the tile (k0 and k0 + 32); the kept element gets value7 * scale + bias
// of its own block's group, the other one exactly 0.
template <typename Act>
__global__ void dequant_qn_kernel(const uint32_t* qweight, const uint32_t* scale_bias, int64_t N, int64_t K,
                                  int64_t Kw, int bits, bool sparse, int group_shift, int64_t n_groups,
                                  int64_t paired_half, Act* out) {
  const int codes_per_word = 32 / bits;
  const int blocks_per_code = sparse ? 2 : 1;  // 32-k blocks a code covers
  const uint32_t mask = sparse ? 0x7Fu : (1u << bits) - 1;
  const int64_t N16 = (N + 15) / 16 * 16;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N * Kw; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / Kw, word_index = i % Kw;
    const int64_t tile = word_index / kWarpLanes, lane = word_index % kWarpLanes;
    const int64_t v = qn_block_row(n, paired_half);
    const uint32_t word = qweight[qn_tile_word_index(v, word_index, Kw / kWarpLanes)];
    for (int j = 0; j < codes_per_word; ++j) {
      const uint32_t code = word >> (32 - bits * (j + 1));
      const float q = float(code & mask);
      for (int e = 0; e < blocks_per_code; ++e) {
        const int64_t block = (tile * codes_per_word + j) * blocks_per_code + e;
        const int64_t k = block * kWarpLanes + lane;
        if (k >= K) break;
        const int64_t group = min(block >> group_shift, n_groups - 1);
        const uint32_t pair = scale_bias[qn_scale_bias_index(group, v, N16)];
        const float scale = bits_to_float(uint16_t(pair & 0xffffu), Act{});
        const float bias = bits_to_float(uint16_t(pair >> 16), Act{});
        const bool kept = !sparse || ((code >> 7 & 1u) == (e == 0 ? 1u : 0u));
        out[n * K + k] = from_float(kept ? fmaf(q, scale, bias) : 0.0f, Act{});
      }
    }
  }
}

}  // namespace

void dequant_qn(const QnDeviceWeight& w, void* out, cudaStream_t stream) {
  if (w.bits < 1 || w.bits > 8 || (w.sparse && w.bits != 8))
    throw Error("dequant_qn: " + std::to_string(w.bits) + "-bit" + (w.sparse ? " s7" : "") +
                " weights (qN, N = 1..8, or s7 pair bytes)");
  const int64_t words = w.N * w.Kw;
  const unsigned blocks = unsigned(std::min<int64_t>((words + 255) / 256, 65536));
  if (w.act == DType::BF16) {
    dequant_qn_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(w.qweight, w.scale_bias, w.N, w.K, w.Kw, w.bits,
                                                                 w.sparse, w.group_shift, w.n_groups, w.paired_half,
                                                                 static_cast<__nv_bfloat16*>(out));
  } else {
    dequant_qn_kernel<__half><<<blocks, 256, 0, stream>>>(w.qweight, w.scale_bias, w.N, w.K, w.Kw, w.bits,
                                                          w.sparse, w.group_shift, w.n_groups, w.paired_half,
                                                          static_cast<__half*>(out));
  }
  CHECK_LAST_LAUNCH("dequant_qn_kernel");
}

}  // namespace gemlite
