#pragma once
// Programmatic Dependent Launch (PDL, sm_90+): a kernel launched with launch_pdl may start
// while the kernel before it in the stream still runs, once every block of that one has
// called pdl_launch_dependents() (or exited). It can then fetch what does not depend on
// its predecessor (weights, scales) and must call pdl_wait() before it reads anything a
// predecessor wrote or writes anything a predecessor reads: griddepcontrol.wait returns
// when the predecessor has completed and its memory is visible. RULE: every block of a
// kernel launched with launch_pdl executes pdl_wait() before its first such access (a
// block that exits touching neither needs none). In a kernel launched without the
// attribute pdl_wait() returns at once and pdl_launch_dependents() only lets a PDL
// successor start early, so both are safe anywhere.
//
// Stream capture keeps the programmatic edges: tests/gpu/test_pdl.cu reads them back
// from a captured graph (cudaGraphDependencyTypeProgrammatic).
//
// GEMLITE_NO_PDL=1 launches everything plainly (A/B measurements).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/cuda_check.h"

namespace gemlite {

// Blocks until the preceding kernel in the stream has completed and its writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream (when launched with launch_pdl) start its blocks now;
// says nothing about this kernel's writes (the successor's pdl_wait waits for completion).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks the copy engine to pull [begin, begin + bytes) into L2 (one instruction, any thread;
// sm_90+). PRECOND: begin 16-byte aligned, bytes a multiple of 16 and < 2^32.
__device__ __forceinline__ void prefetch_l2(const void* begin, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(begin), "r"(bytes) : "memory");
#endif
}

// Whether launch_pdl sets the attribute: a device of compute capability >= 9.0 and no
// GEMLITE_NO_PDL=1. Read once per process (the current device at the first call).
inline bool pdl_enabled() {
  static const bool enabled = [] {
    const char* off = std::getenv("GEMLITE_NO_PDL");
    if (off && std::strcmp(off, "1") == 0) return false;
    int device = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 9;
  }();
  return enabled;
}

// How many blocks of `kernel` can be resident at once (0 without PDL, or with
// GEMLITE_PDL_PREFETCH=0): the first wave, the only blocks that can start before the
// predecessor ends, so the only ones whose prefetch before pdl_wait() can overlap it.
inline int pdl_prefetch_blocks(const void* kernel, int block_threads, size_t smem) {
  static const bool prefetch = [] {
    const char* off = std::getenv("GEMLITE_PDL_PREFETCH");
    return !(off && std::strcmp(off, "0") == 0);
  }();
  if (!pdl_enabled() || !prefetch) return 0;
  int device = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block_threads, smem));
  return sms * per_sm;
}

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization
// (when pdl_enabled()); `name` goes into the error message.
template <typename... Params, typename... Args>
void launch_pdl(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  check_last_launch(name, __FILE__, __LINE__);
}

}  // namespace gemlite
