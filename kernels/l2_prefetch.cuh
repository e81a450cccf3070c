#pragma once
// Pulling the weights of kernels still to come into L2 from a kernel that leaves the memory
// idle. At batch 1 a decode step is memory-bound GEMVs and, between q/k/v and o, the
// attention kernel, which reads a few KB of KV cache at the start of the context: for its
// few microseconds DRAM does nothing. Its blocks hand the o projection's (and the first of
// gate/up's) weights to the copy engine (cp.async.bulk.prefetch.L2), so those GEMVs find
// them in L2. Measured in runtime/cuda/attention.cu.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gemlite {

// Up to kMaxRanges spans of device memory, in the order they are wanted.
struct L2Prefetch {
  static constexpr int kMaxRanges = 8;
  const char* begin[kMaxRanges] = {};
  uint64_t bytes[kMaxRanges] = {};  // multiples of 16, begin 16-byte aligned
  int count = 0;
  uint64_t total = 0;  // Σ bytes

  // Appends [data, data + size) cut to 16-byte bounds, keeping the list within `budget`
  // bytes in all (< 4 GiB) and kMaxRanges spans (what does not fit is left out: a hint).
  void add(const void* data, size_t size, uint64_t budget) {
    const uintptr_t first = (reinterpret_cast<uintptr_t>(data) + 15) / 16 * 16;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(data) + size) / 16 * 16;
    if (!data || count == kMaxRanges || last <= first || total >= budget) return;
    const uint64_t take = last - first < budget - total ? last - first : (budget - total) / 16 * 16;
    if (take == 0) return;
    begin[count] = reinterpret_cast<const char*>(first);
    bytes[count] = take;
    total += take;
    ++count;
  }
};

// Block `block` of `blocks` asks for its share of `list` (consecutive bytes
// [total * block / blocks, total * (block + 1) / blocks), at 16-byte bounds): one
// instruction per range it touches, from one thread. A hint: no data is returned and
// nothing waits for it.
__device__ __forceinline__ void prefetch_share_l2(const L2Prefetch& list, int64_t block, int64_t blocks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint64_t lo = list.total * uint64_t(block) / uint64_t(blocks) / 16 * 16;
  const uint64_t hi = list.total * uint64_t(block + 1) / uint64_t(blocks) / 16 * 16;
  uint64_t offset = 0;  // of range r in the list's bytes
  for (int r = 0; r < list.count && offset < hi; offset += list.bytes[r], ++r) {
    const uint64_t from = lo > offset ? lo - offset : 0;
    const uint64_t to = hi - offset < list.bytes[r] ? hi - offset : list.bytes[r];
    if (from >= to) continue;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(list.begin[r] + from), "r"(uint32_t(to - from))
                 : "memory");
  }
#endif
}

}  // namespace gemlite
