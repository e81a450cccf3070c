#pragma once
// Programmatic Dependent Launch (PDL, sm_90+): a kernel launched with launch_pdl may start
// while the kernel before it in the stream still runs, once every block of that one has
// called pdl_launch_dependents() (or exited). It can then fetch what does not depend on
// its predecessor (weights, scales) and must call pdl_wait() before it reads anything a
// predecessor wrote or writes anything a predecessor reads: griddepcontrol.wait returns
// when the predecessor has completed and its memory is visible. RULE: every block of a
// kernel launched with launch_pdl executes pdl_wait() before its first such access and
// before it exits, even one that touches nothing: a grid that could finish before its
// predecessor would let its successor's wait miss that predecessor. (A block that touches
// nothing may leave without it where another block of the grid always waits: the decode
// attention's splits past the context, runtime/cuda/attention.cu and attention_grouped.cu.)
// In a kernel launched without the attribute pdl_wait() returns at once and
// pdl_launch_dependents() only lets a PDL successor start early, so both are safe anywhere.
//
// Stream capture keeps the programmatic edges: tests/gpu/test_pdl.cu reads them back
// from a captured graph (cudaGraphDependencyTypeProgrammatic).
//
// GEMLITE_NO_PDL=1 launches everything plainly (A/B measurements).
//
// Measured (H100, decode from a CUDA graph, gemv_qn / gemm_fpx / gemv_dense launched with
// it, the ops kernels calling pdl_launch_dependents() first, 2026-11-23, on the code before
// q/k/v and gate/up were fused (13 kernels a layer); tg128 tok/s,
// PDL vs GEMLITE_NO_PDL=1, same binary, one session:
//   gemlite-bench --device cuda --synthetic MODEL -f FORMAT -p 0 -n 128 -r 3):
//   llama2-7b       q4g64 249.7 vs 242.7 (+2.9 %)  fp6 240.6 vs 236.4 (+1.8 %)  q8 208.4 vs 206.8 (+0.8 %)
//   tinyllama-1.1b  q4g64 769.7 vs 741.7 (+3.8 %)  fp6 751.5 vs 719.4 (+4.5 %)
//                   q8 759.4 vs 728.9 (+4.2 %)     f16 582.1 vs 574.8 (+1.3 %)
// Back-to-back GEMVs (gemlite-bench --kernels, q4g64 fp16 M = 1, cold L2): 4096 x 4096
// 7.8 -> 7.1 us, K 4096 N 11008 17.7 -> 16.9, K 11008 N 4096 15.2 -> 14.5.
// Then the ops kernels too (embed, rmsnorm, rope_store, attention, silu_mul, argmax,
// add_bias, to_f32:
// launch_pdl, pdl_wait before their first dependent access; rmsnorm fetches its weights
// before the wait): llama2-7b q4g64 tg128 320.4 -> 347.4 tok/s (GEMLITE_NO_PDL=1: 330.1,
// so PDL on the GEMVs alone had lost to none: the ops kernels' launches stayed exposed).
// Tried and dropped: each first-wave block pulling its whole slice of W into L2 before the
// wait (cp.async.bulk.prefetch.L2) lost to no prefetch everywhere: llama2-7b q4g64 237.4
// vs 248.1, tinyllama fp6 656.6 vs 758.1, q8 679.6 vs 769.5 (slower than without PDL).
#include <cuda_runtime.h>

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

// kernel<<<grid, block, smem, stream>>>(args...) in thread-block clusters of `cluster`
// blocks (sm_90; (1, 1, 1): no cluster attribute), with programmatic stream serialization
// (when pdl_enabled()); `name` goes into the error message.
template <typename... Params, typename... Args>
void launch_pdl_clusters(const char* name, void (*kernel)(Params...), dim3 grid, dim3 cluster, dim3 block,
                         size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attributes[2] = {};
  unsigned count = 0;
  if (pdl_enabled()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (cluster.x * cluster.y * cluster.z > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = cluster.x;
    attributes[count].val.clusterDim.y = cluster.y;
    attributes[count].val.clusterDim.z = cluster.z;
    ++count;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  check_last_launch(name, __FILE__, __LINE__);
}

// A kernel and the dynamic shared memory it launches with.
template <typename Kernel>
struct KernelWithSmem {
  Kernel kernel;
  size_t smem_bytes;
};
// KERNEL with SMEM bytes of dynamic shared memory, its allowance raised past the default 48
// KB once per process (cudaFuncSetAttribute is not a stream operation: at the first call,
// not inside a graph capture).
template <auto KERNEL, size_t SMEM>
KernelWithSmem<decltype(KERNEL)> kernel_with_smem() {
  static const bool allowed = [] {
    CUDA_CHECK(cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, int(SMEM)));
    return true;
  }();
  (void)allowed;
  return {KERNEL, SMEM};
}

// Blocks of `kernel` (`threads` a block, `smem` dynamic shared memory) the device runs at
// once in clusters of 1, 2, 4 and 8 along z (cudaOccupancyMaxActiveClusters times the
// cluster size): what a launch rule counts as a wave of a split-K kernel whose blocks
// split K over a cluster (gemm_fpx's and gemm_qn's tiled kernels).
template <typename... Params>
void resident_blocks_in_clusters(void (*kernel)(Params...), int threads, size_t smem, int (&of_size)[4]) {
  for (int i = 0, z = 1; i < 4; ++i, z *= 2) {
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 1;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = unsigned(z);
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(1, 1, unsigned(z));
    config.blockDim = dim3(unsigned(threads));
    config.dynamicSmemBytes = smem;
    config.attrs = &cluster;
    config.numAttrs = 1;
    int clusters = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
    of_size[i] = clusters * z;
  }
}

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization.
template <typename... Params, typename... Args>
void launch_pdl(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, Args&&... args) {
  launch_pdl_clusters(name, kernel, grid, dim3(1, 1, 1), block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace gemlite
