#include "runtime/cuda/cuda_context.h"

#include "kernels/cuda_check.h"

namespace gemlite {

CudaContext::CudaContext() {
  CUDA_CHECK(cudaStreamCreate(&stream));
  CUBLAS_CHECK(cublasCreate(&cublas));
  CUBLAS_CHECK(cublasSetStream(cublas, stream));
}

CudaContext::~CudaContext() {
  // Destructors must not throw: errors here would only repeat an earlier, reported one.
  cudaStreamSynchronize(stream);
  cublasDestroy(cublas);
  cudaStreamDestroy(stream);
}

std::shared_ptr<void> device_alloc(const std::shared_ptr<CudaContext>& ctx, size_t bytes) {
  void* ptr = nullptr;
  CUDA_CHECK(cudaMallocAsync(&ptr, bytes == 0 ? 1 : bytes, ctx->stream));
  // The deleter holds the context, so the stream outlives every buffer ordered on it.
  return std::shared_ptr<void>(ptr, [ctx](void* p) { cudaFreeAsync(p, ctx->stream); });
}

Tensor device_tensor(const std::shared_ptr<CudaContext>& ctx, DType dtype, int64_t rows, int64_t cols) {
  Tensor t;
  t.dtype = dtype;
  t.rows = rows;
  t.cols = cols;
  t.storage = device_alloc(ctx, size_t(rows * cols) * dtype_size(dtype));
  t.data = t.storage.get();
  return t;
}

}  // namespace gemlite
