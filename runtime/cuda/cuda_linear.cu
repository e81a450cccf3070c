#include "runtime/cuda/cuda_linear.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/fpx/dequant_fpx.h"
#include "kernels/fpx/gemm_fpx.h"
#include "kernels/qn/dequant_qn.h"
#include "kernels/qn/gemm_qn.h"
#include "kernels/qn/gemv_qn.h"
#include "runtime/cuda/ops.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

// The most rows forward runs on gemv_qn: prompt chunks of up to this many rows run a qN /
// s7 weight as gemv_qn over slices of kGemvQnMaxRows rows instead of the dense copy + cuBLAS:
// the slices read the packed weight once each, the dense path writes and reads 2 bytes a
// weight before its GEMM even starts.
// GEMLITE_GEMV_SLICED_MAX_M overrides it (8 turns the slices off), for A/B measurements.
// Measured on one shape, fp16, q4g64 and q8; s7 reads q4g128's bytes and dequantizes
// through the same code, so it sides with q4g64; bf16 runs within 1-2 % of fp16 in both
// paths' kernel benchmarks. With slices of 8 rows (the tenth session) the crossover lay at
// 32 rows (README, "short prompts").
// Since the eleventh session a slice takes 16 rows (gemv_qn's 16-row kernel: one pass of 16
// rows costs 0.73-0.77x two passes of 8 at q4g64, 0.62-0.66x at q8, kernels/qn/MEASURED.md), which
// moved the crossover up. Measured again (H100, one machine, the twelfth session,
// `gemlite-bench --device cuda --synthetic llama2-7b -f q4g64,q8 -p 16,24,32,48,64,96 -n 0
// -r 3`, GEMLITE_GEMV_SLICED_MAX_M=8 vs 128, tok/s):
//   q4g64  pp16 1270 -> 3623  pp24 1893 -> 3308  pp32 2513 -> 3791
//          pp48 3736 -> 3901  pp64 4912 -> 3953  pp96 7279 -> 4075
//   q8     pp16 1211 -> 3580  pp24 1809 -> 3063  pp32 2384 -> 3691
//          pp48 3559 -> 3851  pp64 4656 -> 3864  pp96 6880 -> 3952
// A 16-row pass costs ~4.3 ms (about 1.9 decode steps) against the dense path's ~12.8 ms
// up to 64 rows: the slices win through 48 rows (three passes) and lose from 64, for both
// formats, so the switch sits at 48.
int64_t gemv_sliced_max_m() {
  static const int64_t max_m = [] {
    const char* v = std::getenv("GEMLITE_GEMV_SLICED_MAX_M");
    return std::max<int64_t>(kGemvMaxM, v ? std::atoll(v) : 48);
  }();
  return max_m;
}

// The rows gemm_qn (the tiled qN matmul, where gemm_qn_runs) takes: kGemvQnMaxRows + 1 up
// to this, gemm_qn_max_m(w) (512 or 256, kernels/qn/gemm_qn.h); fewer run one gemv_qn pass, more
// the dense copy + cuBLAS. Measured (H100, fp16, cold L2, 2026-11-27, gemlite-bench
// --kernels --kernel-set gemv GEMLITE_BENCH_M=17..64, us, gemm_qn / gemv_qn over slices of
// 16 / the dense copy + cuBLAS; larger M in gemm_qn.cu and the README):
//   q4g64 4096 x 12288  M = 17  24.6 / 40.7 / 90.9   M = 64  25.6 / 104.8 / 87.9
//   q4g64 11008 x 4096  M = 17  34.2 / 35.9 / 81.7
//   q8    11008 x 4096  M = 17  34.5 / 43.5 / 84.0   M = 64  35.6 / 122.3 / 85.7
// so gemm_qn from 17 rows; llama2-7b q4g64 (gemlite-bench -p 64,128,256 -n 0, same
// machine, tok/s, before gemm_qn -> with it, 8 and 16 row blocks only): pp64 4945 ->
// 12758, pp128 9599 -> 17716, pp256 16845 -> 21936. GEMLITE_GEMM_QN_MAX_M replaces it (0
// turns gemm_qn off), for A/B measurements.
int64_t gemm_qn_rows_up_to(const QnDeviceWeight& w) {
  static const char* const cap = std::getenv("GEMLITE_GEMM_QN_MAX_M");
  return cap ? std::max<int64_t>(0, std::atoll(cap)) : gemm_qn_max_m(w);
}

class CudaLinear final : public QuantLinear {
 public:
  // `weight` is what runs: `sources` stacked along N (concat_rows), or the one source.
  // The sources are views of the checkpoint's memory; `weight` may be a stacked host copy,
  // so a dense weight's upload reads the sources. paired_half > 0: a qN SwiGLU pair
  // [gate; up] (QnDeviceWeight::paired_half).
  CudaLinear(const PackedWeight& weight, const std::vector<const PackedWeight*>& sources,
             std::shared_ptr<CudaContext> ctx, DType act, int64_t paired_half = 0)
      : QuantLinear(weight), ctx_(std::move(ctx)), act_(act) {
    if (act != DType::F16 && act != DType::BF16)
      throw Error(std::string("cuda backend: linear layers for activation type ") + dtype_name(act) +
                  " (expected F16 or BF16)");
    if (is_qn() || is_s7()) {
      // upload_qn_weight allocates the device memory itself: check first, for a clear error.
      require_device_memory(weight.nbytes(), "a " + format().name() + " weight [" + std::to_string(weight.rows) +
                                                 ", " + std::to_string(weight.cols) + "]");
      qn_ = upload_qn_weight(weight, act, paired_half);  // s7 runs on the same kernel (kernels/s7/gemv_s7.h)
      bias_ = qn_.bias;                     // shared by the dense path of large M
      try {  // here, not at the first forward_residual, which may be inside a graph capture
        if (paired_half == 0)
          sum_squares_ = device_tensor(ctx_, DType::F32, kGemvMaxM, gemv_qn_blocks(qn_), "a projection's sum of squares");
      } catch (...) {  // no destructor runs for a constructor that throws
        free_qn_weight(&qn_);
        throw;
      }
    } else if (is_fpx()) {
      require_device_memory(weight.nbytes(), "a " + format().name() + " weight [" + std::to_string(weight.rows) +
                                                 ", " + std::to_string(weight.cols) + "]");
      fpx_ = upload_fpx_weight(weight, act);
      bias_ = fpx_.bias;
      try {
        sum_squares_ = device_tensor(ctx_, DType::F32, kFpxMaxM, gemm_fpx_norm_parts(fpx_), "a projection's sum of squares");
      } catch (...) {
        free_fpx_weight(&fpx_);
        throw;
      }
    } else {
      upload_dense(sources);  // the only path dense formats have
      sum_squares_ = device_tensor(ctx_, DType::F32, kGemvMaxM, gemv_dense_blocks(weight.rows),
                                   "a projection's sum of squares");
      const auto bias = weight.parts.find("bias");
      if (bias != weight.parts.end()) {
        own_bias_ = device_alloc(ctx_, bias->second.nbytes(), "a bias");
        CUDA_CHECK(cudaMemcpyAsync(own_bias_.get(), bias->second.data, bias->second.nbytes(),
                                   cudaMemcpyHostToDevice, ctx_->stream));
        bias_ = static_cast<const float*>(own_bias_.get());
      }
    }
  }
  ~CudaLinear() override {
    cudaStreamSynchronize(ctx_->stream);  // launches may still read qn_ / fpx_
    free_qn_weight(&qn_);
    free_fpx_weight(&fpx_);
  }

  // x [M, K] -> y [M, N], fp16 or bf16 (the backend's activation type), on its stream.
  //
  // THE DISPATCH RULE (the measurements behind each switch sit beside its constant):
  //   qN / qNgG and s7, M <= kGemvMaxM (8) -> gemv_qn, the fused dequantize + GEMV that
  //     reads the packed weight once (it adds the bias itself); a gate/up pair stacked
  //     for SwiGLU -> gemv_qn_swiglu through forward_swiglu (below);
  //   qN / qNgG (2..8 bits) and s7 with K % 8 == 0 and 16-byte aligned x on an H100, kGemvQnMaxRows + 1 to
  //     gemm_qn_rows_up_to(w) rows -> gemm_qn, the tiled matmul that dequantizes the packed
  //     weight in registers (bias too; x permuted into the context's scratch first);
  //   the other qN and s7 (1 bit, K % 8 != 0, another GPU) up to gemv_sliced_max_m() rows
  //     -> gemv_qn over slices of kGemvQnMaxRows rows, each reading the packed weight
  //     once, where that beats making the dense copy;
  //   fp6 / fp5, M <= gemm_fpx_max_m (kFpxTiledMaxM on an H100, else kFpxMaxM) -> gemm_fpx,
  //     the tensor-core FPx matmul (bias too; where gemm_fpx_runs_tiled -- above kFpxMaxM,
  //     and M 9..16 on a wide weight -- its tiled kernel, x permuted into the context's
  //     scratch first);
  //   dense f16/bf16/f32, M <= 8 -> gemv_dense;
  //   everything larger (prefill) -> cuBLAS over a dense copy of W, then the bias.
  // qN's, s7's and fp6 / fp5's dense copies are transient: dequant_qn / dequant_fpx write
  // them into the context's scratch (shared by all layers) before each GEMM, so the
  // model's memory stays that of its packed weights; dense f32 weights are rounded to
  // fp16/bf16 like the activations. The copy is of the whole weight at once (slabs of row
  // blocks small enough to stay in L2 between the copy and cuBLAS, one GEMM each, the same
  // scratch every slab, were tried in commit 6dccf80 and dropped: llama2-7b q4g64,
  // whole / 12 MB / 24 MB slabs, tok/s: pp64 4902 / 2053 / 4088, pp128 9421 / 4294 / 7299,
  // pp512 24786 / 15082 / 19046 (one H100 run): cuBLAS on a few hundred rows at a time
  // loses far more than the DRAM traffic the slabs save).
  void forward(const Tensor& x, Tensor& y) const override {
    const int64_t M = x.rows, N = out_features(), K = in_features();
    check_shapes(x, y, N);
    if (gemm_qn_serves(x)) {
      const size_t scratch_bytes = gemm_qn_scratch_bytes(qn_, int(M));
      void* scratch = ctx_->scratch(scratch_bytes, "activations permuted for gemm_qn");
      gemm_qn(qn_, x.data, y.data, int(M), act_, ctx_->stream, scratch, scratch_bytes);
      return;
    }
    if (qn_.qweight && M <= gemv_sliced_max_m()) {
      for_row_slices(x, y, [&](const Tensor& xs, Tensor& ys) {
        gemv_qn(qn_, xs.data, ys.data, int(xs.rows), act_, ctx_->stream);
      });
      return;
    }
    if (fpx_.packed && M <= gemm_fpx_max_m(fpx_)) {
      // The tiled kernel (gemm_fpx_runs_tiled) permutes x into the scratch first.
      const size_t scratch_bytes = gemm_fpx_runs_tiled(fpx_, int(M)) ? gemm_fpx_scratch_bytes(fpx_, int(M)) : 0;
      void* scratch = scratch_bytes ? ctx_->scratch(scratch_bytes, "activations permuted for gemm_fpx") : nullptr;
      gemm_fpx(fpx_, x.data, y.data, int(M), act_, ctx_->stream, {}, nullptr, scratch, scratch_bytes);
      return;
    }
    const void* dense = nullptr;
    if (is_qn() || is_s7()) {
      void* scratch = ctx_->scratch(dense_bytes(), dense_what());
      dequant_qn(qn_, scratch, ctx_->stream);
      dense = scratch;
    } else if (is_fpx()) {
      void* scratch = ctx_->scratch(dense_bytes(), dense_what());
      dequant_fpx(fpx_, scratch, ctx_->stream);
      dense = scratch;
    } else {
      dense = dense_.get();  // uploaded at load
    }
    if (M <= kGemvMaxM) {
      launch_gemv_dense(dense, x.data, bias_, y.data, int(M), N, K, act_, ctx_->stream);
      return;
    }
    // Row-major y [M, N] = x [M, K] · Wᵀ is, column-major, yᵀ [N, M] = W(ᵀ as stored) · xᵀ:
    // W [N, K] row-major is a column-major [K, N] matrix (ld K), taken transposed.
    const float alpha = 1.0f, beta = 0.0f;
    const cudaDataType_t type = cublas_type(act_);
    CUBLAS_CHECK(cublasGemmEx(ctx_->cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, dense, type,
                              int(K), x.data, type, int(K), &beta, y.data, type, int(N), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
    if (bias_) launch_add_bias(y.data, bias_, M, N, act_, ctx_->stream);
  }

  // A qN SwiGLU pair where forward runs gemv_qn: gemv_qn_swiglu (silu(gate) * up in the
  // GEMV's epilogue, one launch where the GEMV and silu_mul were two: 2.8 us of a Llama-2-7B
  // layer, ncu). A pending norm comes only at M <= kGemvMaxM (fuses_rmsnorm): one slice.
  bool forward_swiglu(const Tensor& x, Tensor& y, const PendingNorm* norm) const override {
    if (qn_.paired_half == 0 || x.rows > gemv_sliced_max_m() || (norm && x.rows > kGemvMaxM) || gemm_qn_serves(x))
      return false;
    check_shapes(x, y, qn_.paired_half);
    const QnPendingNorm pending = pending_norm(norm, x.rows);
    for_row_slices(x, y, [&](const Tensor& xs, Tensor& ys) {
      gemv_qn_swiglu(qn_, xs.data, ys.data, int(xs.rows), act_, ctx_->stream, {}, norm ? &pending : nullptr);
    });
    return true;
  }

  // The RMSNorm between blocks in the GEMVs' epilogues (gemv_qn_residual, gemv_dense's
  // DenseGemvNorm), where the add + RMSNorm kernels cost 7 % of a Llama-2-7B token (H100,
  // q4g64 tg128 401 vs 433 tok/s without them): fused, 423 (q8 313 -> 336, f16 186 -> 190).
  // fp6 / fp5: gemm_fpx_residual and gemm_fpx's pending norm, up to its decode M.
  bool fuses_rmsnorm(int64_t M) const override {
    if (fpx_.packed) return M <= kFpxMaxM;
    return M <= kGemvMaxM && (qn_.qweight || is_dense());
  }

  PendingNorm forward_residual(const Tensor& x, Tensor& residual, const Tensor& norm_weight, float eps,
                               Tensor& scaled) const override {
    const int64_t M = x.rows, N = out_features();
    if (!fuses_rmsnorm(M) || qn_.paired_half != 0)
      return QuantLinear::forward_residual(x, residual, norm_weight, eps, scaled);
    check_shapes(x, scaled, N);
    if (residual.rows != M || residual.cols != N || residual.dtype != act_ || norm_weight.dtype != DType::F32 ||
        norm_weight.numel() != N)
      throw Error("cuda linear " + format().name() + ": residual [" + std::to_string(residual.rows) + ", " +
                  std::to_string(residual.cols) + "] " + dtype_name(residual.dtype) + " and norm weight of " +
                  std::to_string(norm_weight.numel()) + " " + dtype_name(norm_weight.dtype) + " for an output [" +
                  std::to_string(M) + ", " + std::to_string(N) + "]");
    PendingNorm pending{sum_squares_.slice_rows(0, M), eps};
    if (qn_.qweight) {
      gemv_qn_residual(qn_, x.data, residual.data, norm_weight.as<float>(), scaled.data,
                       pending.sum_squares.as<float>(), int(M), act_, ctx_->stream);
    } else if (fpx_.packed) {
      gemm_fpx_residual(fpx_, x.data, residual.data, norm_weight.as<float>(), scaled.data,
                        pending.sum_squares.as<float>(), int(M), act_, ctx_->stream);
    } else {
      DenseGemvNorm norm;
      norm.residual = residual.data;
      norm.norm_weight = norm_weight.as<float>();
      norm.sum_squares = pending.sum_squares.as<float>();
      launch_gemv_dense(dense_.get(), x.data, bias_, scaled.data, int(M), N, in_features(), act_, ctx_->stream, norm);
    }
    return pending;
  }

  void forward_normed(const Tensor& scaled, const PendingNorm& norm, Tensor& y) const override {
    const int64_t M = scaled.rows;
    if (!fuses_rmsnorm(M) || qn_.paired_half != 0) {
      QuantLinear::forward_normed(scaled, norm, y);
      return;
    }
    check_shapes(scaled, y, out_features());
    const QnPendingNorm pending = pending_norm(&norm, M);
    if (qn_.qweight) {
      gemv_qn(qn_, scaled.data, y.data, int(M), act_, ctx_->stream, {}, &pending);
    } else if (fpx_.packed) {
      gemm_fpx(fpx_, scaled.data, y.data, int(M), act_, ctx_->stream, {}, &pending);
    } else {
      DenseGemvNorm dense_norm;
      dense_norm.pending_sum_squares = pending.sum_squares;
      dense_norm.pending_parts = pending.parts;
      dense_norm.eps = pending.eps;
      launch_gemv_dense(dense_.get(), scaled.data, bias_, y.data, int(M), out_features(), in_features(), act_,
                        ctx_->stream, dense_norm);
    }
  }

 private:
  // Whether forward runs x on gemm_qn (see gemm_qn_rows_up_to): qN / s7 rows past one gemv_qn pass.
  bool gemm_qn_serves(const Tensor& x) const {
    return qn_.qweight && x.rows > kGemvQnMaxRows && x.rows <= gemm_qn_rows_up_to(qn_) && gemm_qn_runs(qn_) &&
           reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  }

  void check_shapes(const Tensor& x, const Tensor& y, int64_t y_cols) const {
    if (x.cols != in_features() || y.cols != y_cols || y.rows != x.rows || x.dtype != act_ || y.dtype != act_)
      throw Error("cuda linear " + format().name() + " [" + std::to_string(out_features()) + ", " +
                  std::to_string(in_features()) + "]: got x [" + std::to_string(x.rows) + ", " +
                  std::to_string(x.cols) + "] " + dtype_name(x.dtype) + " and y [" + std::to_string(y.rows) + ", " +
                  std::to_string(y.cols) + "] " + dtype_name(y.dtype));
  }
  // f(x rows, y rows) for consecutive slices of at most kGemvQnMaxRows rows. A pending
  // norm's sums of squares are not sliced with them: a norm comes only with M <= kGemvMaxM
  // (fuses_rmsnorm, forward_swiglu), one slice, and sum_squares_ has kGemvMaxM rows.
  template <class F>
  static void for_row_slices(const Tensor& x, Tensor& y, F&& f) {
    for (int64_t m = 0; m < x.rows; m += kGemvQnMaxRows) {
      const int64_t rows = std::min<int64_t>(kGemvQnMaxRows, x.rows - m);
      Tensor ys = y.slice_rows(m, rows);
      f(x.slice_rows(m, rows), ys);
    }
  }

  QnPendingNorm pending_norm(const PendingNorm* norm, int64_t M) const {
    if (!norm) return {};
    if (norm->sum_squares.dtype != DType::F32 || norm->sum_squares.rows != M)
      throw Error("cuda linear " + format().name() + ": a pending norm of " +
                  std::to_string(norm->sum_squares.rows) + " rows for " + std::to_string(M));
    return QnPendingNorm{norm->sum_squares.as<float>(), int(norm->sum_squares.cols), norm->eps};
  }
  bool is_qn() const { return format().kind == FormatKind::QN; }
  bool is_s7() const { return format().kind == FormatKind::S7; }
  bool is_fpx() const { return format().kind == FormatKind::FPX; }
  bool is_dense() const { return format().kind == FormatKind::Dense; }
  size_t dense_bytes() const { return size_t(out_features() * in_features()) * dtype_size(act_); }
  std::string dense_what() const {
    return "the dense copy of a " + format().name() + " weight [" + std::to_string(out_features()) + ", " +
           std::to_string(in_features()) + "]";
  }

  // The sources' tensors `part` one after another: the stacked tensor, in device memory.
  void copy_rows_to_device(const std::vector<const PackedWeight*>& sources, const std::string& part,
                           void* device) const {
    size_t at = 0;
    for (const PackedWeight* source : sources) {
      const HostTensor& t = source->part(part);
      CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(device) + at, t.data, t.nbytes(), cudaMemcpyHostToDevice,
                                 ctx_->stream));
      at += t.nbytes();
    }
  }

  // A dense format's W [N, K] -> dense_ [N, K] (act). A dense weight stored in the activation
  // type is copied as it is; other rows are decoded on the host with the CPU reference
  // decoder (exact by construction; seconds for a 7B model, once, at load).
  void upload_dense(const std::vector<const PackedWeight*>& sources) {
    const int64_t N = out_features(), K = in_features();
    dense_ = device_alloc(ctx_, dense_bytes(), dense_what());
    if (format().kind == FormatKind::Dense && format().dense_dtype == act_) {  // stored as computed: copy as is
      copy_rows_to_device(sources, "weight", dense_.get());
      return;
    }
    std::vector<float> row(static_cast<size_t>(K));           // [K]
    std::vector<uint16_t> dense(static_cast<size_t>(N * K));  // [N, K] fp16 or bf16 bits
    const bool bf16 = act_ == DType::BF16;
    int64_t n = 0;
    for (const PackedWeight* source : sources) {
      const RowDecoder decode = make_row_decoder(*source);
      for (int64_t i = 0; i < source->rows; ++i, ++n) {
        decode(i, row.data());
        for (int64_t k = 0; k < K; ++k)
          dense[size_t(n * K + k)] = bf16 ? float_to_bf16(row[size_t(k)]) : float_to_half(row[size_t(k)]);
      }
    }
    // Pageable source: the call returns once `dense` is staged, so it may go out of scope.
    CUDA_CHECK(cudaMemcpyAsync(dense_.get(), dense.data(), dense.size() * 2, cudaMemcpyHostToDevice,
                               ctx_->stream));
  }

  std::shared_ptr<CudaContext> ctx_;
  DType act_;
  QnDeviceWeight qn_;                     // qN / s7 only: the packed weight for gemv_qn
  FpxDeviceWeight fpx_;                   // fp6 / fp5 only: the packed weight for gemm_fpx
  std::shared_ptr<void> dense_;           // [N, K] act: dense formats only
  std::shared_ptr<void> own_bias_;        // [N] F32 of non-qN formats
  const float* bias_ = nullptr;           // [N] F32 or null
  Tensor sum_squares_;                    // [kGemvMaxM (fp6/fp5: kFpxMaxM), blocks] F32 (not paired): forward_residual's output
};

}  // namespace

std::unique_ptr<QuantLinear> make_cuda_linear(const PackedWeight& weight, std::shared_ptr<CudaContext> ctx,
                                              DType act) {
  return std::make_unique<CudaLinear>(weight, std::vector<const PackedWeight*>{&weight}, std::move(ctx), act);
}

std::unique_ptr<QuantLinear> make_stacked_cuda_linear(const std::vector<const PackedWeight*>& weights,
                                                      std::shared_ptr<CudaContext> ctx, DType act, StackedUse use) {
  const std::optional<PackedWeight> stacked = concat_rows(weights);  // dropped once uploaded
  if (!stacked) return nullptr;
  const FormatKind kind = stacked->format.kind;
  const bool paired = use == StackedUse::SwiGLU && weights.size() == 2 && weights[0]->rows == weights[1]->rows &&
                      weights[0]->rows % 8 == 0 && (kind == FormatKind::QN || kind == FormatKind::S7);
  return std::make_unique<CudaLinear>(*stacked, weights, std::move(ctx), act, paired ? weights[0]->rows : 0);
}

}  // namespace gemlite
