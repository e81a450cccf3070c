#pragma once
// Checked CUDA and cuBLAS calls: every failure becomes a gemlite::Error that names the
// call site and the runtime's own words, e.g.
//   "kernels/qn/gemv_qn.cu:210: cudaMalloc(&p, bytes) failed: out of memory".
// Kernel launches report errors only through cudaGetLastError, so every launch is
// followed by check_last_launch(). No call here synchronizes, so checked code stays
// graph-capturable.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "runtime/error.h"

namespace gemlite {

[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* what, const char* file,
                                          int line) {
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
              cudaGetErrorString(code) + " (" + cudaGetErrorName(code) + ")");
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t code, const char* what,
                                            const char* file, int line) {
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
              cublasGetStatusString(code) + " (cuBLAS status " + std::to_string(int(code)) + ")");
}

inline void check_last_launch(const char* kernel, const char* file, int line) {
  const cudaError_t code = cudaGetLastError();
  if (code != cudaSuccess) throw_cuda_error(code, (std::string("launch of ") + kernel).c_str(), file, line);
}

}  // namespace gemlite

#define CUDA_CHECK(expr)                                                              \
  do {                                                                                \
    const cudaError_t gemlite_cuda_code_ = (expr);                                    \
    if (gemlite_cuda_code_ != cudaSuccess)                                            \
      ::gemlite::throw_cuda_error(gemlite_cuda_code_, #expr, __FILE__, __LINE__);     \
  } while (0)

#define CUBLAS_CHECK(expr)                                                            \
  do {                                                                                \
    const cublasStatus_t gemlite_cublas_code_ = (expr);                               \
    if (gemlite_cublas_code_ != CUBLAS_STATUS_SUCCESS)                                \
      ::gemlite::throw_cublas_error(gemlite_cublas_code_, #expr, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch: CHECK_LAST_LAUNCH("gemv_qn_kernel");
#define CHECK_LAST_LAUNCH(kernel) ::gemlite::check_last_launch(kernel, __FILE__, __LINE__)
