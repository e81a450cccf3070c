#pragma once
// A weight shape of the kernel benchmarks (host-only, for the programs that set them).
#include <cstdint>

namespace gemlite {

struct KernelShape {
  int64_t K, N;  // W is [N, K]
};

}  // namespace gemlite
