// The dense copy of an FPx weight on the device (dequant_fpx.h): one warp per tile (row
// block of 16 rows x 128 k), decoded with the matmul's own bit moves (fpx_tile.cuh), each
// value scaled by its row's factor in fp32 and stored as four consecutive k per row.
#include "kernels/fpx/dequant_fpx.h"

#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/fpx/fpx_format.h"
#include "kernels/fpx/fpx_tile.cuh"
#include "runtime/error.h"

namespace gemlite {
namespace {

constexpr int kDequantWarps = 8;  // tiles per block

template <bool BF16>
__device__ __forceinline__ float2 to_float2_bits(uint32_t pair) {
  if constexpr (BF16) return make_float2(__uint_as_float(pair << 16), __uint_as_float(pair & 0xFFFF0000u));
  return __half22float2(*reinterpret_cast<const __half2*>(&pair));
}

// out[row, k .. k + 3] = the four decoded values {lo: k, k + 1; hi: k + 2, k + 3} times
// factor, those inside K; one 8-byte store where all four are and the row is 8-byte aligned.
template <bool BF16>
__device__ __forceinline__ void store4(uint16_t* out_row, int k, int K, uint32_t lo, uint32_t hi, float factor,
                                       bool vector_ok) {
  const float2 a = to_float2_bits<BF16>(lo), b = to_float2_bits<BF16>(hi);
  const uint16_t v[4] = {to_activation<BF16>(a.x * factor), to_activation<BF16>(a.y * factor),
                         to_activation<BF16>(b.x * factor), to_activation<BF16>(b.y * factor)};
  if (vector_ok && k + 4 <= K) {
    *reinterpret_cast<uint2*>(out_row + k) = make_uint2(v[0] | uint32_t(v[1]) << 16, v[2] | uint32_t(v[3]) << 16);
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (k + i < K) out_row[k + i] = v[i];
}

// PRECOND: blockDim.x = 32 kDequantWarps, grid.x = ceil(RB KT / kDequantWarps); vector_ok:
// K % 4 == 0 and out 8-byte aligned.
template <int EBITS, int MBITS, bool BF16>
__global__ void __launch_bounds__(32 * kDequantWarps)
    dequant_fpx_kernel(const uint8_t* packed, const float* row_factor, int64_t N, int K, int KT, int64_t tiles,
                       bool vector_ok, uint16_t* out) {
  using P = Planes<EBITS, MBITS>;
  constexpr int kTileBytes = 256 * P::kBits;
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const int64_t tile = int64_t(blockIdx.x) * kDequantWarps + threadIdx.x / 32;  // rb KT + t: the packed order
  if (tile >= tiles) return;
  const int64_t rb = tile / KT;
  const int t = int(tile % KT);
  uint32_t words[P::kWords];
  load_tile<EBITS, MBITS>(packed + tile * kTileBytes, lane, words);
  const int64_t row_lo = rb * kFpxTileRows + gid, row_hi = row_lo + 8;  // row_factor is padded to 16 RB
  const float factor_lo = row_factor[row_lo], factor_hi = row_factor[row_hi];
  static_for<0, 8>([&](auto step) {
    constexpr int S = decltype(step)::value;
    const int k = t * kFpxTileK + 16 * S + 4 * tig;
    uint32_t a[4];  // a0, a2: row gid (k, k + 1 | k + 2, k + 3); a1, a3: row gid + 8
    dequantize_pairs<EBITS, MBITS, BF16>(code_bytes<EBITS, MBITS, S, 0>(words), a[0], a[1]);
    dequantize_pairs<EBITS, MBITS, BF16>(code_bytes<EBITS, MBITS, S, 1>(words), a[2], a[3]);
    if (row_lo < N) store4<BF16>(out + row_lo * K, k, K, a[0], a[2], factor_lo, vector_ok);
    if (row_hi < N) store4<BF16>(out + row_hi * K, k, K, a[1], a[3], factor_hi, vector_ok);
  });
}

using DequantFn = void (*)(const uint8_t*, const float*, int64_t, int, int, int64_t, bool, uint16_t*);

template <bool BF16>
DequantFn pick_kernel(int ebits, int mbits) {
  return with_fpx_code(ebits, mbits, "dequant_fpx", [](auto e, auto m) -> DequantFn {
    return dequant_fpx_kernel<decltype(e)::value, decltype(m)::value, BF16>;
  });
}

}  // namespace

void dequant_fpx(const FpxDeviceWeight& w, void* out, cudaStream_t stream) {
  if (!w.packed) throw Error("dequant_fpx: weight not uploaded");
  const DequantFn kernel = w.act == DType::BF16 ? pick_kernel<true>(w.ebits, w.mbits) : pick_kernel<false>(w.ebits, w.mbits);
  const int64_t tiles = w.row_blocks * w.k_tiles;
  const int64_t blocks = (tiles + kDequantWarps - 1) / kDequantWarps;
  kernel<<<dim3(unsigned(blocks)), dim3(32 * kDequantWarps), 0, stream>>>(
      w.packed, w.row_factor, w.N, int(w.K), int(w.k_tiles), tiles,
      w.K % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0,  // every row 8-byte aligned
      static_cast<uint16_t*>(out));
  check_last_launch("dequant_fpx_kernel", __FILE__, __LINE__);
}

}  // namespace gemlite
