#pragma once
// What every piece of the CUDA backend shares: the one stream all its work runs on, the
// cuBLAS handle bound to it, and stream-ordered device memory. Held by shared_ptr from the
// backend, each linear and each tensor's storage, so whichever dies last frees it.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace gemlite {

struct CudaContext {
  CudaContext();
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  // A blocking stream (not cudaStreamNonBlocking) on purpose: upload_qn_weight copies with
  // plain cudaMemcpy on the legacy stream, and a blocking stream orders after it.
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;  // bound to `stream`
  // cuBLAS's workspace, set once, so a captured GEMM allocates nothing during capture.
  void* cublas_workspace = nullptr;
  int sm_count = 0;  // of the current device, for grids sized to fill it

  // One scratch buffer for transient work on `stream`, shared by every user of this
  // context: the dense copy of a quantized weight before a prefill GEMM, the prefill
  // attention's scores. Stream order makes sharing safe (each user's kernels finish reading
  // before the next user's start writing). Grown to the largest request. Any call inside a
  // graph capture is an Error (decode steps need none, and a later growth would free
  // memory a graph still used). Out of memory is an Error naming `what`.
  void* scratch(size_t bytes, const std::string& what);

  // Whether `stream` is being captured into a graph (work that needs host values or new
  // memory must not run then).
  bool capturing() const;

 private:
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

// cuBLAS's name for an activation type (F16 or BF16).
inline cudaDataType_t cublas_type(DType act) { return act == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F; }

// Throws Error("out of GPU memory: <what> needs X MiB, Y MiB free of Z MiB") when `bytes`
// cannot be had; for allocations made outside device_alloc (cudaMalloc in kernels/).
void require_device_memory(size_t bytes, const std::string& what);

// `bytes` of device memory, allocated and freed in order on ctx's stream (cudaMallocAsync),
// so a buffer dropped while kernels still read it is freed only after they finish. Too
// little memory is an Error saying what was asked and what is free, not a crash.
std::shared_ptr<void> device_alloc(const std::shared_ptr<CudaContext>& ctx, size_t bytes,
                                   const std::string& what = "a buffer");

// A device tensor [rows, cols] of `dtype`, uninitialised.
Tensor device_tensor(const std::shared_ptr<CudaContext>& ctx, DType dtype, int64_t rows, int64_t cols,
                     const std::string& what = "a buffer");

}  // namespace gemlite
