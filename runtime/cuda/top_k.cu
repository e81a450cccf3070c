// Top-k on the device for a sampler: the k most likely logits and their ids, in the
// Sampler's order (more_likely: larger first, equal values by lower id, NaN last), so a
// top-k draw moves 2k numbers to the host instead of the whole vocabulary.
//
// One block. Each logit gets a 64-bit key that orders exactly as more_likely does and is
// unique: the high half maps the float to an unsigned integer that grows with the value
// (NaN 0, -0 taken as +0), the low half is ~id. The k-th largest key is found by radix
// select, most significant byte first: a 256-bin histogram of the keys that share the
// prefix chosen so far, then the bin where the k-th falls. It stops early when that bin
// holds exactly the keys still needed (with real logits, after the value bytes). The keys
// at or above the threshold are then exactly k; each one's rank is the number of larger
// ones among them.
//
// Histogram updates are aggregated per warp (__match_any_sync): the first byte is the
// sign and most of the exponent, so nearly all logits fall into a few bins, and plain
// shared atomics would serialize on them.
#include <cmath>
#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/pdl.cuh"
#include "runtime/cuda/act_type.cuh"
#include "runtime/cuda/ops.h"

namespace gemlite {
namespace {

constexpr int kTopKThreads = 1024;
constexpr int kBins = 256;

// Larger key = more likely (more_likely's order), unique per id.
__device__ __forceinline__ uint64_t candidate_key(float value, int id) {
  uint32_t ordered = 0;  // NaN: below everything, -inf included
  if (!isnan(value)) {
    const uint32_t bits = __float_as_uint(value == 0.0f ? 0.0f : value);  // -0 == +0
    ordered = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  }
  return (uint64_t(ordered) << 32) | uint32_t(~uint32_t(id));
}

// The bin in which the `remaining`-th largest key falls, counting from bin 255 down, and
// how many keys lie in the bins above it. Run by one warp; hist holds kBins counts.
__device__ void find_bin(const unsigned* hist, int remaining, int* bin, int* above) {
  constexpr int kPerLane = kBins / 32;
  const int lane = threadIdx.x % 32;
  // Lane l holds bins 255 - 8l down to 248 - 8l: lane order is descending key order.
  int own = 0;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) own += int(hist[kBins - 1 - kPerLane * lane - j]);
  int inclusive = own;  // keys in the bins of lanes 0..lane
  for (int offset = 1; offset < 32; offset *= 2) {
    const int v = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += v;
  }
  const unsigned reached = __ballot_sync(0xffffffffu, inclusive >= remaining);
  const int owner = __ffs(reached) - 1;  // exists: the caller keeps remaining <= all keys
  if (lane == owner) {
    int before = inclusive - own;
    for (int j = 0; j < kPerLane; ++j) {
      const int b = kBins - 1 - kPerLane * lane - j;
      if (before + int(hist[b]) >= remaining) {
        *bin = b;
        *above = before;
        break;
      }
      before += int(hist[b]);
    }
  }
}

// PRECOND: one block of kTopKThreads threads, 1 <= k <= min(n, kMaxTopK), n <= INT32_MAX - kTopKThreads.
template <typename Act>
__global__ void __launch_bounds__(kTopKThreads) top_k_kernel(const Act* x, int n, int k, int* ids, float* values) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ unsigned hist[kBins];
  __shared__ uint64_t prefix;  // the chosen bytes so far, in place
  __shared__ int remaining;    // keys still to take at or below the prefix
  __shared__ int chosen_bin, keys_above;
  __shared__ bool settled;
  __shared__ uint64_t picked_keys[kMaxTopK];
  __shared__ int picked_count;
  const int lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    prefix = 0;
    remaining = k;
    settled = false;
    picked_count = 0;
  }
  // Every thread runs the same number of rounds, so that whole warps meet in __match_any_sync.
  const int rounds = (n + kTopKThreads - 1) / kTopKThreads;
  int shift = 64;
  for (int pass = 0; pass < 8; ++pass) {
    shift -= 8;
    for (int b = threadIdx.x; b < kBins; b += kTopKThreads) hist[b] = 0;
    __syncthreads();
    if (settled) break;  // read after the barrier: the same decision in every thread
    const uint64_t mask = pass == 0 ? 0 : ~uint64_t(0) << (shift + 8);
    const uint64_t want = prefix;
    for (int r = 0; r < rounds; ++r) {
      const int i = r * kTopKThreads + int(threadIdx.x);
      int bin = -1;
      if (i < n) {
        const uint64_t key = candidate_key(to_float(x[i]), i);
        if ((key & mask) == want) bin = int((key >> shift) & (kBins - 1));
      }
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin >= 0 && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], unsigned(__popc(peers)));
    }
    __syncthreads();
    if (threadIdx.x < 32) find_bin(hist, remaining, &chosen_bin, &keys_above);
    __syncthreads();
    if (threadIdx.x == 0) {
      prefix |= uint64_t(chosen_bin) << shift;
      remaining -= keys_above;
      settled = int(hist[chosen_bin]) == remaining;  // the whole bin is taken: stop here
    }
    __syncthreads();
  }
  // Keys >= prefix (its lower bytes zero) are exactly k; gather them in any order.
  const uint64_t threshold = prefix;
  for (int i = threadIdx.x; i < n; i += kTopKThreads) {
    const uint64_t key = candidate_key(to_float(x[i]), i);
    if (key >= threshold) picked_keys[atomicAdd(&picked_count, 1)] = key;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < k; c += kTopKThreads) {
    const uint64_t key = picked_keys[c];
    int rank = 0;
    for (int j = 0; j < k; ++j) rank += picked_keys[j] > key;
    const int id = int(~uint32_t(key));
    ids[rank] = id;
    values[rank] = to_float(x[id]);
  }
}

}  // namespace

void launch_top_k(const void* x, int64_t n, int k, int* ids, float* values, DType act, cudaStream_t stream) {
  if (k < 1 || k > kMaxTopK || k > n || n > INT32_MAX - kTopKThreads)  // i + kTopKThreads stays an int
    throw Error("top_k: " + std::to_string(k) + " of " + std::to_string(n) + " (k is 1.." +
                std::to_string(kMaxTopK) + " and at most n)");
  dispatch_act(act, "top_k", [&](auto tag) {
    using Act = decltype(tag);
    launch_pdl("top_k_kernel", top_k_kernel<Act>, dim3(1), dim3(kTopKThreads), 0, stream, static_cast<const Act*>(x),
               int(n), k, ids, values);
  });
}

}  // namespace gemlite
