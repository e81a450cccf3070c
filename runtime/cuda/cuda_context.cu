#include "runtime/cuda/cuda_context.h"

#include <cstdio>

#include "kernels/cuda_check.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

// 32 MiB: what NVIDIA's cuBLAS documentation recommends for Hopper.
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / 1048576.0);
  return text;
}

[[noreturn]] void throw_out_of_memory(size_t bytes, const std::string& what) {
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  throw Error("out of GPU memory: " + what + " needs " + mib(bytes) + ", " + mib(free) + " free of " + mib(total) +
              " (a smaller model, format or -c/--ctx-size would fit)");
}

}  // namespace

CudaContext::CudaContext() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaStreamCreate(&stream));
  CUBLAS_CHECK(cublasCreate(&cublas));
  CUBLAS_CHECK(cublasSetStream(cublas, stream));
  // fp32 sums throughout, as the CPU reference and our kernels do: by default cuBLAS may
  // reduce split-K partial sums in the output type (fp16/bf16). No speed change measured
  // (Llama-2-7B q4g64 pp512 36411 -> 36120 tok/s, within run-to-run spread).
  CUBLAS_CHECK(cublasSetMathMode(cublas, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  CUDA_CHECK(cudaMalloc(&cublas_workspace, kCublasWorkspaceBytes));
  CUBLAS_CHECK(cublasSetWorkspace(cublas, cublas_workspace, kCublasWorkspaceBytes));
}

CudaContext::~CudaContext() {
  // Destructors must not throw: errors here would only repeat an earlier, reported one.
  cudaStreamSynchronize(stream);
  cudaFree(scratch_);
  cublasDestroy(cublas);
  cudaFree(cublas_workspace);
  cudaStreamDestroy(stream);
}

void* CudaContext::scratch(size_t bytes, const std::string& what) {
  if (capturing())
    throw Error("cuda backend: " + what + " needs " + mib(bytes) + " of scratch inside a graph capture");
  if (bytes <= scratch_bytes_) return scratch_;
  if (scratch_) CUDA_CHECK(cudaFreeAsync(scratch_, stream));  // after the work queued that reads it
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  const cudaError_t code = cudaMallocAsync(&scratch_, bytes, stream);
  if (code == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: the context stays usable
    throw_out_of_memory(bytes, what);
  }
  CUDA_CHECK(code);
  scratch_bytes_ = bytes;
  return scratch_;
}

bool CudaContext::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

void require_device_memory(size_t bytes, const std::string& what) {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  if (bytes > free) throw_out_of_memory(bytes, what);
}

std::shared_ptr<void> device_alloc(const std::shared_ptr<CudaContext>& ctx, size_t bytes, const std::string& what) {
  void* ptr = nullptr;
  const cudaError_t code = cudaMallocAsync(&ptr, bytes == 0 ? 1 : bytes, ctx->stream);
  if (code == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: the context stays usable
    throw_out_of_memory(bytes, what);
  }
  CUDA_CHECK(code);
  // The deleter holds the context, so the stream outlives every buffer ordered on it.
  return std::shared_ptr<void>(ptr, [ctx](void* p) { cudaFreeAsync(p, ctx->stream); });
}

Tensor device_tensor(const std::shared_ptr<CudaContext>& ctx, DType dtype, int64_t rows, int64_t cols,
                     const std::string& what) {
  Tensor t;
  t.dtype = dtype;
  t.rows = rows;
  t.cols = cols;
  t.storage = device_alloc(ctx, size_t(rows * cols) * dtype_size(dtype), what);
  t.data = t.storage.get();
  return t;
}

}  // namespace gemlite
