#pragma once
// Device helpers the kernels share: a compile-time loop, the 16-bit activation bits, and
// the last step of a pending RMSNorm (QnPendingNorm in kernels/qn/gemv_qn.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace gemlite {
namespace {

// f(integral_constant<int, i>) for i = BEGIN .. END - 1: an unrolled loop whose index is a
// compile-time constant (for template arguments such as a code's position).
template <int BEGIN, int END, class F>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (BEGIN < END) {
    f(std::integral_constant<int, BEGIN>{});
    static_for<BEGIN + 1, END>(f);
  }
}

// fp16 (BF16 false) or bf16 bits <-> float, rounding to nearest even.
template <bool BF16>
__device__ __forceinline__ float from_activation(uint16_t bits) {
  if constexpr (BF16) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
  } else {
    return __half2float(__ushort_as_half(bits));
  }
}
template <bool BF16>
__device__ __forceinline__ uint16_t to_activation(float v) {
  if constexpr (BF16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  } else {
    return __half_as_ushort(__float2half_rn(v));
  }
}

// rsqrt(Σ_p parts[p] / K + eps) of one activation row, summed by a whole warp in a fixed
// order (lane strides, then a butterfly): every block of every kernel that finishes the
// same pending norm gets the same value. Every lane returns it.
__device__ __forceinline__ float pending_inv_rms(const float* parts, int n_parts, int K, float eps) {
  const int lane = threadIdx.x % 32;
  float sum = 0;
  for (int i = lane; i < n_parts; i += 32) sum += parts[i];
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  return rsqrtf(sum / float(K) + eps);
}

}  // namespace
}  // namespace gemlite
