#pragma once
// The reference backend: plain C++ over float32 activations, multi-threaded with OpenMP.
// Every GPU kernel and the CUDA backend are checked against what this computes.
#include "runtime/backend.h"

namespace gemlite {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace gemlite
