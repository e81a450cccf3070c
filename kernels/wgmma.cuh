#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a): the four warps of a warpgroup multiply a 64 x 16 A
// held in their registers by a 16 x N B in shared memory into 64 x N fp32 accumulators,
// asynchronously. Each warp's A registers are exactly an mma.sync m16n8k16 A fragment of
// its 16 rows (warp w % 4 of the group: rows 16 (w % 4) .. + 15), and its accumulators are
// the m16n8 C fragments of those rows for the N / 8 n-tiles in order, so code that feeds
// mma.sync feeds this unchanged.
//
// B is K-major without swizzling: "core matrices" of 8 n x 8 k (16 bytes a row, 128 bytes
// each); wgmma_desc describes where they lie (see the PTX ISA, "matrix descriptor").
//
// Compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL; CMake turns an architecture list's
// 90 into 90a); for other architectures the functions are empty (wgmma_rs traps) and
// callers must not launch what uses them (gemm_fpx checks for a 9.0 device running PTX of
// 9.0 or later, which the sm_90a image is).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_check.h"

namespace gemlite {
namespace {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GEMLITE_WGMMA 1
#endif

// Whether `kernel` (one that uses wgmma) runs on the current device: compute capability 9.0
// with a binary of the kernel for 9.0 or later (ptxVersion >= 90) -- not PTX of an older
// architecture compiled at load, where the wgmma (and bulk copy, cluster) helpers are
// empty. The 9.0 binary is the sm_90a image: CMake turns an architecture list's 90 into
// 90a, so no plain compute_90 code is built. Host code; callers cache the answer (one GPU
// a process).
template <typename... Params>
bool wgmma_kernel_runs(void (*kernel)(Params...)) {
  int device = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) return false;
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return attributes.ptxVersion >= 90;
}

// Shared-memory matrix descriptor, no swizzle: `k_stride` bytes between the core matrices
// of neighbouring 8-k groups, `n_stride` bytes between those of neighbouring 8-n groups.
__device__ __forceinline__ uint64_t wgmma_desc(const void* smem, uint32_t k_stride, uint32_t n_stride) {
  const uint32_t address = uint32_t(__cvta_generic_to_shared(smem));
  return uint64_t((address & 0x3FFFF) >> 4) | uint64_t(k_stride >> 4) << 16 | uint64_t(n_stride >> 4) << 32;
}

// Orders this thread's register writes (A fragments, accumulators) before the wgmmas after it.
__device__ __forceinline__ void wgmma_fence() {
#ifdef GEMLITE_WGMMA
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef GEMLITE_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
// Waits until at most N of this warpgroup's committed groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef GEMLITE_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}
// Pins a register that an issued wgmma still reads (an A fragment) or writes (an
// accumulator): called after the wgmma_wait that retires it, it keeps the value live, so
// the compiler cannot hand the physical register to other values while the asynchronous
// wgmma uses it (ptxas does not know the A registers are read late: without this the
// FPx matmul's decode temporaries overwrote in-flight A fragments).
__device__ __forceinline__ void wgmma_keep(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void wgmma_keep(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Makes this thread's ordinary shared-memory stores visible to wgmma's reads (the async proxy).
__device__ __forceinline__ void fence_async_shared() {
#ifdef GEMLITE_WGMMA
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// acc [N / 8][4] += A (registers) · B (descriptor), m64 N k16, fp16 or bf16 inputs.
template <int N, bool BF16>
__device__ __forceinline__ void wgmma_rs(float (&acc)[N / 8][4], const uint32_t (&a)[4], uint64_t b);

#ifdef GEMLITE_WGMMA
// The accumulator operands four at a time, and both activation types' specializations of
// one shape from its asm (a macro taking the type string).
#define GEMLITE_D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define GEMLITE_WGMMA_RS(N, ASM)                                                                    \
  template <>                                                                                       \
  __device__ __forceinline__ void wgmma_rs<N, false>(float(&d)[N / 8][4], const uint32_t(&a)[4], uint64_t b) { \
    ASM("f16.f16");                                                                                 \
  }                                                                                                 \
  template <>                                                                                       \
  __device__ __forceinline__ void wgmma_rs<N, true>(float(&d)[N / 8][4], const uint32_t(&a)[4], uint64_t b) {  \
    ASM("bf16.bf16");                                                                               \
  }
#define GEMLITE_WGMMA_N32(TYPES)                                                                                     \
  asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPES                                                  \
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, " \
               "1, 1, 1, 0;"                                                                                        \
               : GEMLITE_D4(0), GEMLITE_D4(1), GEMLITE_D4(2), GEMLITE_D4(3)                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))
GEMLITE_WGMMA_RS(32, GEMLITE_WGMMA_N32)
#undef GEMLITE_WGMMA_N32
#define GEMLITE_WGMMA_N64(TYPES)                                                                                     \
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPES                                                  \
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "  \
               "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, 0;"      \
               : GEMLITE_D4(0), GEMLITE_D4(1), GEMLITE_D4(2), GEMLITE_D4(3), GEMLITE_D4(4), GEMLITE_D4(5),          \
                 GEMLITE_D4(6), GEMLITE_D4(7)                                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))
GEMLITE_WGMMA_RS(64, GEMLITE_WGMMA_N64)
#undef GEMLITE_WGMMA_N64
#define GEMLITE_WGMMA_N128(TYPES)                                                                                    \
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPES " {"                                           \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                             \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                   \
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                   \
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"                     \
               "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 0;"                                                          \
               : GEMLITE_D4(0), GEMLITE_D4(1), GEMLITE_D4(2), GEMLITE_D4(3), GEMLITE_D4(4), GEMLITE_D4(5),          \
                 GEMLITE_D4(6), GEMLITE_D4(7), GEMLITE_D4(8), GEMLITE_D4(9), GEMLITE_D4(10), GEMLITE_D4(11),        \
                 GEMLITE_D4(12), GEMLITE_D4(13), GEMLITE_D4(14), GEMLITE_D4(15)                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))
GEMLITE_WGMMA_RS(128, GEMLITE_WGMMA_N128)
#undef GEMLITE_WGMMA_N128
#undef GEMLITE_WGMMA_RS
#undef GEMLITE_D4
#else
// Without sm_90a (PTX for another architecture, e.g. nvcc -arch=sm_90a's compute_90 copy
// for later GPUs): never launched there (see the top); if a build without an sm_90a image
// ever ran it on a 9.0 device, it stops the kernel rather than return wrong sums.
template <int N, bool BF16>
__device__ __forceinline__ void wgmma_rs(float (&)[N / 8][4], const uint32_t (&)[4], uint64_t) {
  __trap();
}
#endif

}  // namespace
}  // namespace gemlite

#undef GEMLITE_WGMMA
