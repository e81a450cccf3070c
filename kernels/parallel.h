#pragma once
// When the format code spreads a loop over OpenMP threads.
#include <cstdint>

namespace gemlite {

// Below this many element operations a parallel region costs more than it saves: waking
// the threads takes ~10 µs, and whole scheduler slices when the cores are oversubscribed
// (CI runs test binaries side by side on 2 cores).
constexpr int64_t kMinParallelWork = int64_t(1) << 16;

}  // namespace gemlite
