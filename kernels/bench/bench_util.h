#pragma once
// What the kernel benchmarks (gemv_bench.cu, fpx_bench.cu) share: random data made on the
// device, graph-replay timing, and the cold-L2 rotation sizes (docs/PERF.md's rules).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bench/kernel_shape.h"
#include "runtime/dtype.h"

namespace gemlite {

// What every kernel benchmark run holds: the device's line ("device: NAME, S SMs, L MB L2")
// and its copy bandwidth (copy_bandwidth.h), both logged at construction; a non-blocking
// stream and a cuBLAS handle on it with a 32 MB workspace. Throws Error on a CUDA failure.
class BenchSession {
 public:
  explicit BenchSession(FILE* log);
  ~BenchSession();
  BenchSession(const BenchSession&) = delete;
  BenchSession& operator=(const BenchSession&) = delete;

  double copy_gbs = 0;  // GB/s, bytes read + written
  int sms = 0;          // the device's SMs
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;

 private:
  void* workspace_ = nullptr;
};

// A splitmix-style hash: random data without a host round trip.
__device__ inline uint32_t bench_hash32(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return uint32_t(z ^ (z >> 31));
}

// words [n] random bits (packed codes: every bit pattern is a valid set of codes).
void fill_words(uint32_t* words, int64_t n, uint32_t seed, cudaStream_t stream);
// values [n] of fp16/bf16 (t): magnitude 2^-5..2^-3 (~0.03..0.125) with random sign.
void fill_values(uint16_t* values, int64_t n, DType t, uint32_t seed, cudaStream_t stream);
const char* act_name(DType t);  // "fp16" or "bf16"

// Median per-launch time in microseconds of `launch(i)` for i = 0..launches-1, captured
// into one graph and replayed `replays` times (after a few launches outside the capture
// for lazy initialisation, and warm-up replays for at least 100 ms).
double time_graph_us(cudaStream_t stream, int launches, int replays, const std::function<void(int)>& launch);

// Weight copies to rotate through so that together they exceed rotation_bytes (cold L2),
// and a launch count that cycles through them a whole number of times. rotation_bytes 0:
// one copy, read again by every launch (warm L2 where it fits; GEMLITE_BENCH_WARM_L2=1).
int copies_for(size_t bytes, size_t rotation_bytes);
int launches_for(int copies);

// GEMLITE_BENCH_* variables narrow a kernel benchmark run (gemlite-bench --kernels takes no
// options of its own). Each reader leaves `out` as it is when the variable is unset and
// throws Error naming the variable for a malformed value.
void env_strings(const char* name, std::vector<std::string>* out);                  // "q4g64,q2g64"
void env_ints(const char* name, std::vector<int>* out);                             // "1,2,4,8"
bool env_flag(const char* name);  // "1" true, unset or "0" false
void env_shapes(const char* name, std::vector<KernelShape>* out);  // "8192x8192,4096x11008": K x N
void env_activations(const char* name, std::vector<DType>* out);                    // "fp16,bf16"

}  // namespace gemlite
