#include "runtime/cuda/cuda_linear.h"

#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/qn/gemv_qn.h"
#include "runtime/cuda/ops.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

class CudaLinear final : public QuantLinear {
 public:
  CudaLinear(const PackedWeight& weight, std::shared_ptr<CudaContext> ctx, DType act)
      : QuantLinear(weight), weight_(weight), ctx_(std::move(ctx)), act_(act) {
    if (act != DType::F16)
      throw Error(std::string("cuda backend: linear layers for activation type ") + dtype_name(act) +
                  " are not implemented (F16 only)");
    if (is_qn()) {
      qn_ = upload_qn_weight(weight, act);
      bias_ = qn_.bias;  // shared by the dense path of large M
    } else {
      upload_dense();  // the only path these formats have
      const auto bias = weight.parts.find("bias");
      if (bias != weight.parts.end()) {
        own_bias_ = device_alloc(ctx_, bias->second.nbytes());
        CUDA_CHECK(cudaMemcpyAsync(own_bias_.get(), bias->second.data, bias->second.nbytes(),
                                   cudaMemcpyHostToDevice, ctx_->stream));
        bias_ = static_cast<const float*>(own_bias_.get());
      }
    }
  }
  ~CudaLinear() override {
    cudaStreamSynchronize(ctx_->stream);  // gemv_qn launches may still read qn_ (plain cudaFree)
    free_qn_weight(&qn_);
  }

  // x [M, K] -> y [M, N], fp16, on the backend's stream.
  //
  // THE DISPATCH RULE: qN / qNgG with M <= kGemvMaxM (decode, small batches) -> gemv_qn, the
  // fused dequantize + GEMV that reads the packed weight once (it adds the bias itself).
  // Everything else -- qN at M > 8 (prefill), fp6, fp5, s7 and dense f16/bf16/f32 -- ->
  // a dense fp16 copy of W made once (for qN lazily, at the first large-M call, so
  // decode-only use never pays its memory) and cuBLAS; the bias is added afterwards.
  // Dense f32 weights are thus rounded to fp16 on the GPU, like the activations.
  void forward(const Tensor& x, Tensor& y) const override {
    const int64_t M = x.rows, N = out_features(), K = in_features();
    if (x.cols != K || y.cols != N || y.rows != M || x.dtype != act_ || y.dtype != act_)
      throw Error("cuda linear " + format().name() + " [" + std::to_string(N) + ", " + std::to_string(K) +
                  "]: got x [" + std::to_string(x.rows) + ", " + std::to_string(x.cols) + "] " + dtype_name(x.dtype) +
                  " and y [" + std::to_string(y.rows) + ", " + std::to_string(y.cols) + "] " + dtype_name(y.dtype));
    if (is_qn() && M <= kGemvMaxM) {
      gemv_qn(qn_, x.data, y.data, int(M), act_, ctx_->stream);
      return;
    }
    if (!dense_) upload_dense();
    // Row-major y [M, N] = x [M, K] · Wᵀ is, column-major, yᵀ [N, M] = W(ᵀ as stored) · xᵀ:
    // W [N, K] row-major is a column-major [K, N] matrix (ld K), taken transposed.
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(ctx_->cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &alpha,
                              dense_.get(), CUDA_R_16F, int(K), x.data, CUDA_R_16F, int(K), &beta, y.data,
                              CUDA_R_16F, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (bias_) launch_add_bias(y.data, bias_, M, N, act_, ctx_->stream);
  }

 private:
  bool is_qn() const { return format().kind == FormatKind::QN; }

  // W [N, K] -> dense_ [N, K] fp16 on the device. A first step: rows are dequantized on the
  // host with the CPU reference decoder (exact by construction, slow for big models) and
  // uploaded; a device dequant kernel per format is the later, faster way.
  void upload_dense() const {
    const int64_t N = out_features(), K = in_features();
    const RowDecoder decode = make_row_decoder(weight_);
    std::vector<float> row(static_cast<size_t>(K));                // [K]
    std::vector<uint16_t> dense(static_cast<size_t>(N * K));       // [N, K] fp16 bits
    for (int64_t n = 0; n < N; ++n) {
      decode(n, row.data());
      for (int64_t k = 0; k < K; ++k) dense[size_t(n * K + k)] = float_to_half(row[size_t(k)]);
    }
    dense_ = device_alloc(ctx_, dense.size() * 2);
    // Pageable source: the call returns once `dense` is staged, so it may go out of scope.
    CUDA_CHECK(cudaMemcpyAsync(dense_.get(), dense.data(), dense.size() * 2, cudaMemcpyHostToDevice,
                               ctx_->stream));
  }

  PackedWeight weight_;  // host view (the checkpoint's memory), for the lazy dense copy
  std::shared_ptr<CudaContext> ctx_;
  DType act_;
  QnDeviceWeight qn_;                     // qN only: the packed weight for gemv_qn
  mutable std::shared_ptr<void> dense_;   // [N, K] fp16, or null until first needed
  std::shared_ptr<void> own_bias_;        // [N] F32 of non-qN formats
  const float* bias_ = nullptr;           // [N] F32 or null
};

}  // namespace

std::unique_ptr<QuantLinear> make_cuda_linear(const PackedWeight& weight, std::shared_ptr<CudaContext> ctx,
                                              DType act) {
  return std::make_unique<CudaLinear>(weight, std::move(ctx), act);
}

}  // namespace gemlite
