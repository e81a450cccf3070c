#pragma once
// Bulk copies (the TMA engine's cp.async.bulk, sm_90a) from global into shared memory,
// completing on an mbarrier, and the mbarrier helpers they need: a phase counts one
// arrival (the thread that expects the bytes) and the bytes the copy delivers.
//
// Compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL, as kernels/wgmma.cuh); elsewhere the
// functions trap, and callers launch what uses them only where wgmma runs.
#include <cstdint>

namespace gemlite {
namespace {

__device__ __forceinline__ uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// One thread, before any copy signals it; then fence_mbarrier_init and a barrier.
__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void fence_mbarrier_init() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// This phase's arrival, expecting `bytes` more to land.
__device__ __forceinline__ void mbarrier_arrive_expect(uint64_t* barrier, uint32_t bytes) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// Waits until the phase of parity `parity` has completed (its bytes visible to this thread).
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, uint32_t parity) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(shared_address(barrier)), "r"(parity)
        : "memory");
  } while (!done);
#else
  __trap();
#endif
}

// `bytes` (a multiple of 16, 16-byte aligned both sides) from global memory to this block's
// shared memory, signalling `barrier` with them as they land.
__device__ __forceinline__ void bulk_copy(void* smem, const void* global, uint32_t bytes, uint64_t* barrier) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(smem)),
               "l"(global), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
#else
  __trap();
#endif
}

}  // namespace
}  // namespace gemlite
