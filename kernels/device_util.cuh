#pragma once
// Device helpers the kernels share: a compile-time loop, the 16-bit activation bits, the
// last step of a pending RMSNorm (QnPendingNorm in kernels/qn/gemv_qn.h), the m16n8k16
// tensor-core mma, asynchronous copies to shared memory, and the cluster barrier and
// distributed shared memory reads.
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
// same pending norm gets the same value. Every lane returns it. In two steps for a kernel
// that loads the parts early (gemv_qn): the lane's strided sum, then the butterfly.
__device__ __forceinline__ float pending_norm_lane_sum(const float* parts, int n_parts) {
  float sum = 0;
  for (int i = threadIdx.x % 32; i < n_parts; i += 32) sum += parts[i];
  return sum;
}
__device__ __forceinline__ float inv_rms_of_lane_sums(float lane_sum, int K, float eps) {
  for (int offset = 16; offset > 0; offset /= 2) lane_sum += __shfl_xor_sync(0xffffffffu, lane_sum, offset);
  return rsqrtf(lane_sum / float(K) + eps);
}
__device__ __forceinline__ float pending_inv_rms(const float* parts, int n_parts, int K, float eps) {
  return inv_rms_of_lane_sums(pending_norm_lane_sum(parts, n_parts), K, eps);
}
// pending_norm_lane_sum of up to 32 x LOADS parts, every load issued before the first add
// (the same sum, in the same order: the parts past n_parts add 0).
template <int LOADS>
__device__ __forceinline__ float pending_norm_lane_sum_unrolled(const float* parts, int n_parts) {
  float v[LOADS];
#pragma unroll
  for (int j = 0; j < LOADS; ++j) {
    const int i = threadIdx.x % 32 + 32 * j;
    v[j] = i < n_parts ? parts[i] : 0.0f;
  }
  float sum = 0;
#pragma unroll
  for (int j = 0; j < LOADS; ++j) sum += v[j];
  return sum;
}

// c += a · b, mma.sync m16n8k16 (sm_80+): fp16 (BF16 false) or bf16 inputs, fp32
// accumulators; a0..a3 the A fragment, b0 b1 the B fragment (two 16-bit values a register).
template <bool BF16>
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}
template <bool BF16>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_16816<BF16>(c, a[0], a[1], a[2], a[3], b0, b1);
}

// 16 bytes global -> shared without passing through registers (sm_80+; L2 only, .cg),
// in groups: commit closes the group of the copies issued since the last one, wait<N>
// returns once at most N groups are still in flight (the thread's own copies only).
// cp_async16_or_zero writes 16 zero bytes instead where !valid (reading nothing).
__device__ __forceinline__ void cp_async16(void* smem, const void* global) {
  const uint32_t dst = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global) : "memory");
}
// As cp_async16, allocating the line in L1 as well (.ca): the blocks of one SM that copy the
// same 16 bytes read L2 once between them. Like any default load it sees the writes of the
// grids it waited for (pdl_wait); it must not follow a write of this grid to those bytes.
__device__ __forceinline__ void cp_async16_ca(void* smem, const void* global) {
  const uint32_t dst = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global) : "memory");
}
__device__ __forceinline__ void cp_async16_or_zero(void* smem, const void* global, bool valid) {
  const uint32_t dst = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(global), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Thread-block clusters (sm_90): a barrier over every thread of the cluster, whose
// release/acquire makes each block's shared-memory writes before it visible to the others'
// reads after it, and a read of two floats of another block's shared memory (distributed
// shared memory) at the address `local` has in this block (8-byte aligned). Before sm_90
// a cluster is one block: the barrier is __syncthreads and `rank` must be 0.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __syncthreads();
#endif
}
__device__ __forceinline__ float2 load_cluster_shared2(const float* local, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t address = uint32_t(__cvta_generic_to_shared(local));
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
  return v;
#else
  return *reinterpret_cast<const float2*>(local);
#endif
}

// Outputs y[0] = y0 and, where `both`, y[1] = y1 (neighbouring columns of a row): one
// 4-byte store where `paired` (y 4-byte aligned), else two.
__device__ __forceinline__ void store_output_pair(uint16_t* y, uint16_t y0, uint16_t y1, bool both, bool paired) {
  if (both && paired) {
    *reinterpret_cast<uint32_t*>(y) = uint32_t(y0) | uint32_t(y1) << 16;
    return;
  }
  y[0] = y0;
  if (both) y[1] = y1;
}

// Σ over the cluster's `splits` blocks (rank order: deterministic) of the two floats at
// `local` in each one's shared memory, after a cluster_sync that published them. All ranks'
// loads are in flight before the sum: one distributed shared memory round trip a pair, not
// `splits`. PRECOND: splits <= MAX_SPLITS.
template <int MAX_SPLITS>
__device__ __forceinline__ float2 cluster_sum2(const float* local, int splits) {
  if (splits == 1) return *reinterpret_cast<const float2*>(local);
  float2 parts[MAX_SPLITS];
#pragma unroll
  for (int q = 0; q < MAX_SPLITS; ++q)
    parts[q] = q < splits ? load_cluster_shared2(local, unsigned(q)) : make_float2(0.0f, 0.0f);
  float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int q = 0; q < MAX_SPLITS; ++q) {
    sum.x += parts[q].x;
    sum.y += parts[q].y;
  }
  return sum;
}

}  // namespace
}  // namespace gemlite
