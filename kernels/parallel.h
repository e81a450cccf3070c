#pragma once
// When the format code spreads a loop over OpenMP threads.
//
// The passes over a whole weight run on all threads: the checks, the conversions, the
// quantizers, the zero-fills (fresh calloc pages, first touched by the threads that fill
// them) and the copies (but a std::vector's zero-fill, as in HostTensor::to_float). With some of them serial, a 16-core host built a synthetic
// llama2-7b (`gemlite-bench --device cuda --synthetic llama2-7b -f F -p 0 -n 1 -r 1`, one
// H200 machine, old -> all parallel) in q4g64 19.7 -> 11.0 s, q8 21.9 -> 11.1, fp6 30.2 ->
// 18.0, f16 32.0 -> 6.1, and uploaded it in 6.2 -> 1.8, 9.0 -> 2.5, 3.4 -> 1.3 and 8.1 -> 3.1
// s: 135 -> 60 s for the four runs, most of a model benchmark's device time. (With packing
// and fp6 encoding made cheaper as well, qn_format.cpp and fpx_format.cpp, the builds take
// 6.9, 6.8, 11.8 and 6.4 s.)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gemlite {

// Below this many element operations a parallel region costs more than it saves: waking
// the threads takes ~10 µs, and whole scheduler slices when the cores are oversubscribed
// (CI runs test binaries side by side on 2 cores).
constexpr int64_t kMinParallelWork = int64_t(1) << 16;

// memcpy over the OpenMP threads in 1 MiB pieces, for copies of whole weights: their
// first touch of fresh pages (page faults) is then spread over the threads as well.
inline void parallel_copy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kPiece = size_t(1) << 20;
  const int64_t pieces = int64_t((bytes + kPiece - 1) / kPiece);
#pragma omp parallel for schedule(static) if (pieces > 1)
  for (int64_t i = 0; i < pieces; ++i) {
    const size_t at = size_t(i) * kPiece;
    std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at, std::min(kPiece, bytes - at));
  }
}

}  // namespace gemlite
