#pragma once
// How a warp reads and decodes one tile of a packed FPx weight (kernels/fpx/fpx_format.h):
// the layout's compile-time description, the lane's loads and the bit moves that turn
// four codes into two 16-bit floats per A-fragment register. Shared by the matmul's two
// kernels (gemm_fpx_register.cuh, gemm_fpx_tiled.cuh) and the dequantizer (dequant_fpx.cu),
// so all of them read the format one way.
//
// A lane (gid = lane / 4, tig = lane % 4) holds, for k-step S (0..7) of a tile, the codes
// of rows gid and gid + 8 at k = 128 t + 16 S + 4 tig + 0..3 (H = 0: + 0, 1; H = 1: + 2, 3).
// The 16-bit floats come out as value * 2^(bias - 15) for fp16 (the per-row factor undoes
// it) and as the value itself for bf16.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/device_util.cuh"  // static_for
#include "runtime/error.h"

namespace gemlite {
namespace {

template <int EBITS, int MBITS>
struct Planes {
  static constexpr int kBits = 1 + EBITS + MBITS;
  __host__ __device__ static constexpr int count() {
    int n = 0, left = kBits;
    for (int w = 4; w > 0; w /= 2)
      while (left >= w) ++n, left -= w;
    return n;
  }
  __host__ __device__ static constexpr int width(int j) {
    int n = 0, left = kBits;
    for (int w = 4; w > 0; w /= 2)
      while (left >= w) {
        if (n == j) return w;
        ++n, left -= w;
      }
    return 0;
  }
  __host__ __device__ static constexpr int offset(int j) {  // bits of the code above plane j
    int o = 0;
    for (int i = 0; i < j; ++i) o += width(i);
    return o;
  }
  // A lane's 32-bit words per tile: plane j's 2 w words start at word 2 offset(j).
  static constexpr int kWords = 2 * kBits;
};

// Where the 16-bit float wants the code: sign at 15, exponent field = E, mantissa starting
// right below it. X holds a code top-aligned in a byte; the half built from that byte
// (high byte, low byte 0) is moved right by SH and masked.
template <int EBITS, int MBITS, bool BF16>
struct HalfPlacement {
  static constexpr int kMantissa = BF16 ? 7 : 10;
  static constexpr int kShift = 15 - kMantissa - EBITS;
  static_assert(kShift >= 0 && kShift < 8 && MBITS <= kMantissa, "code does not fit this 16-bit float");
  static constexpr uint32_t kMagnitude = ((1u << (EBITS + MBITS)) - 1) << (kMantissa - MBITS);
  static constexpr uint32_t kHigh = (kMagnitude >> 8) * 0x01010101u;
  static constexpr uint32_t kLow = (kMagnitude & 0xFFu) * 0x01010101u;
};

__device__ __forceinline__ uint4 load_streaming16(const void* p) {  // read once: skip L1
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 load_streaming8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// A lane's words of tile `tile` (all planes), in plane order; from global memory (read
// once: past L1) or, SHARED, from a copy of the tile in shared memory (16-byte loads of
// consecutive lanes: no bank conflicts).
template <int EBITS, int MBITS, bool SHARED = false>
__device__ __forceinline__ void load_tile(const uint8_t* tile, int lane, uint32_t (&words)[Planes<EBITS, MBITS>::kWords]) {
  using P = Planes<EBITS, MBITS>;
#pragma unroll
  for (int j = 0; j < P::count(); ++j) {
    const int w = P::width(j);
    const uint8_t* plane = tile + 256 * P::offset(j);
    if (w >= 2) {
#pragma unroll
      for (int c = 0; c < w / 2; ++c) {
        const uint8_t* at = plane + c * 512 + lane * 16;
        const uint4 v = SHARED ? *reinterpret_cast<const uint4*>(at) : load_streaming16(at);
        uint32_t* dst = words + 2 * P::offset(j) + 4 * c;
        dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
      }
    } else {
      const uint8_t* at = plane + lane * 8;
      const uint2 v = SHARED ? *reinterpret_cast<const uint2*>(at) : load_streaming8(at);
      words[2 * P::offset(j)] = v.x;
      words[2 * P::offset(j) + 1] = v.y;
    }
  }
}

// The four codes (h = 0: k + 0/1, h = 1: k + 2/3; bytes 3 2 1 0 = rows gid, gid+8 of the
// odd k, rows gid, gid+8 of the even k) of k-step S, top-aligned in the bytes; bits below
// a code are garbage.
template <int EBITS, int MBITS, int S, int H>
__device__ __forceinline__ uint32_t code_bytes(const uint32_t (&words)[Planes<EBITS, MBITS>::kWords]) {
  using P = Planes<EBITS, MBITS>;
  uint32_t x = 0;
#pragma unroll
  for (int j = 0; j < P::count(); ++j) {
    const int w = P::width(j), off = P::offset(j);
    const int steps_per_word = 4 / w;
    const uint32_t word = words[2 * off + S / steps_per_word];
    const int u = (S % steps_per_word) * 2 + H;
    const int shift = u * w - off;  // field top at byte bit 7 - u w, wanted at 7 - off
    const uint32_t moved = shift >= 0 ? word << shift : word >> -shift;
    if (j == 0) {
      x = moved;
    } else {
      const uint32_t keep = ((0xFF00u >> off) & 0xFFu) * 0x01010101u;  // the bits above plane j
      x = (x & keep) | (moved & ~keep);
    }
  }
  return x;
}

// A fragment registers {a0, a1} (h = 0) or {a2, a3} (h = 1): rows gid and gid + 8.
template <int EBITS, int MBITS, bool BF16>
__device__ __forceinline__ void dequantize_pairs(uint32_t x, uint32_t& row_lo, uint32_t& row_hi) {
  using L = HalfPlacement<EBITS, MBITS, BF16>;
  const uint32_t d1 = (x & 0x80808080u) | ((x >> L::kShift) & L::kHigh);
  const uint32_t d2 = L::kLow ? (x << (8 - L::kShift)) & L::kLow : 0u;
  row_lo = __byte_perm(d1, d2, 0x3715);  // bytes 3 (k+1) and 1 (k): row gid
  row_hi = __byte_perm(d1, d2, 0x2604);  // bytes 2 and 0: row gid + 8
  if constexpr (BF16) {
    constexpr int kBias = (1 << (EBITS - 1)) - 1;
    constexpr uint32_t kTwoPow = uint32_t(254 - kBias) << 7;  // bf16 bits of 2^(127 - bias)
    __nv_bfloat162 f, lo, hi;
    const uint32_t f_bits = kTwoPow | kTwoPow << 16;
    memcpy(&f, &f_bits, 4);
    memcpy(&lo, &row_lo, 4);
    memcpy(&hi, &row_hi, 4);
    lo = __hmul2(lo, f);
    hi = __hmul2(hi, f);
    memcpy(&row_lo, &lo, 4);
    memcpy(&row_hi, &hi, 4);
  }
}

// f(integral_constant<int, EBITS>, integral_constant<int, MBITS>) for the codes the FPx
// kernels are instantiated for, fp6 (e3m2) and fp5 (e2m2): the one place that turns a
// weight's runtime (ebits, mbits) into template arguments. Throws Error for other codes
// (`who` names the caller).
template <class F>
decltype(auto) with_fpx_code(int ebits, int mbits, const char* who, F&& f) {
  if (ebits == 3 && mbits == 2) return f(std::integral_constant<int, 3>{}, std::integral_constant<int, 2>{});
  if (ebits == 2 && mbits == 2) return f(std::integral_constant<int, 2>{}, std::integral_constant<int, 2>{});
  throw Error(std::string(who) + ": e" + std::to_string(ebits) + "m" + std::to_string(mbits) +
              " is not instantiated (fp6 e3m2 and fp5 e2m2 are)");
}

}  // namespace
}  // namespace gemlite
