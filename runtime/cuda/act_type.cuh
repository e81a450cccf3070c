#pragma once
// Device helpers the backend's kernels share: activation type conversions, block
// reductions, and the one switch from a runtime DType to a kernel's activation type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace gemlite {

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }

template <typename Act> __device__ __forceinline__ Act from_float(float v);
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Two activations in one 32-bit word: __half2 / __nv_bfloat162, for 16-byte vector loads.
template <typename Act> struct PairOf;
template <> struct PairOf<__half> { using type = __half2; };
template <> struct PairOf<__nv_bfloat16> { using type = __nv_bfloat162; };
__device__ __forceinline__ float2 to_float2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 v) { return __bfloat1622float2(v); }

// The 8 activations of a 16-byte load as fp32, and back (rounded to nearest).
template <typename Act>
__device__ __forceinline__ void unpack8(const uint4& packed, float (&out)[8]) {
  using Pair = typename PairOf<Act>::type;
  const Pair* pairs = reinterpret_cast<const Pair*>(&packed);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = to_float2(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
// Two fp32 values as one register of two Act (low half first): an mma fragment.
template <typename Act>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  const Act l = from_float<Act>(lo), h = from_float<Act>(hi);
  uint16_t bits_lo, bits_hi;
  memcpy(&bits_lo, &l, 2);
  memcpy(&bits_hi, &h, 2);
  return uint32_t(bits_lo) | uint32_t(bits_hi) << 16;
}
template <typename Act>
__device__ __forceinline__ uint4 pack8(const float (&v)[8]) {
  uint4 packed;
  Act* out = reinterpret_cast<Act*>(&packed);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = from_float<Act>(v[i]);
  return packed;
}

// VEC consecutive activations as fp32, and back: VEC = 8 one 16-byte access (p 16-byte
// aligned), VEC = 1 one element.
template <typename Act, int VEC>
__device__ __forceinline__ void load_act(const Act* p, float (&v)[VEC]) {
  static_assert(VEC == 1 || VEC == 8, "1 or 8 activations");
  if constexpr (VEC == 8) {
    unpack8<Act>(*reinterpret_cast<const uint4*>(p), v);
  } else {
    v[0] = to_float(*p);
  }
}
template <typename Act, int VEC>
__device__ __forceinline__ void store_act(Act* p, const float (&v)[VEC]) {
  static_assert(VEC == 1 || VEC == 8, "1 or 8 activations");
  if constexpr (VEC == 8) {
    *reinterpret_cast<uint4*>(p) = pack8<Act>(v);
  } else {
    *p = from_float<Act>(v[0]);
  }
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// op over v of every thread of the block; every thread gets the result.
// PRECOND: blockDim.x is a multiple of 32 and at most 1024; every thread of the block calls it.
template <typename Op>
__device__ float block_reduce(float v, Op op) {
  __shared__ float partial[32];  // one per warp
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  __syncthreads();  // a previous call's readers of `partial` are done
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = partial[0];
  for (int i = 1; i < n_warps; ++i) v = op(v, partial[i]);
  return v;
}

// Calls f(Act{}) with the device type of `act`: every kernel of the backend exists for
// fp16 and bf16 activations.
template <typename F>
void dispatch_act(DType act, const char* op, F&& f) {
  switch (act) {
    case DType::F16: f(__half{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    default:
      throw Error(std::string("cuda backend: ") + op + " has no kernel for activation type " +
                  dtype_name(act) + " (F16 or BF16)");
  }
}

}  // namespace gemlite
