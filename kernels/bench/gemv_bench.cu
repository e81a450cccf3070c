#include "kernels/bench/gemv_bench.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

#include "kernels/bench/bench_util.h"
#include "kernels/cuda_check.h"
#include "kernels/device_upload.h"
#include "kernels/qn/dequant_qn.h"
#include "kernels/qn/gemm_qn.h"
#include "kernels/qn/gemv_qn.h"
#include "kernels/qn/qn_format.h"
#include "kernels/s7/s7_format.h"
#include "kernels/group_quant.h"
#include "kernels/weight_format.h"

namespace gemlite {

namespace {

// y [M, N] = x [M, K] · Wᵀ with W [N, K] row-major: cuBLAS column-major C [N, M] =
// op(A)ᵀ B with A = W seen as [K, N] (what torch.nn.functional.linear calls).
double cublas_us(cublasHandle_t handle, cudaStream_t stream, DType act, int64_t K, int64_t N, int M,
                 const void* x, void* y, size_t rotation_bytes, int replays) {
  const size_t bytes = size_t(N) * size_t(K) * 2;
  const int copies = copies_for(bytes, rotation_bytes);
  std::vector<void*> weights(static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    CUDA_CHECK(cudaMalloc(&weights[size_t(c)], bytes));
    fill_values(static_cast<uint16_t*>(weights[size_t(c)]), N * K, act, 100 + uint32_t(c), stream);
  }
  const cudaDataType type = act == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.0f, beta = 0.0f;
  const double us = time_graph_us(stream, launches_for(copies), replays, [&](int i) {
    CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(N), M, int(K), &alpha,
                              weights[size_t(i % copies)], type, int(K), x, type, int(K), &beta, y, type,
                              int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  for (void* w : weights) CUDA_CHECK(cudaFree(w));
  return us;
}

// A random qN weight on the device with the layout upload_qn_weight makes.
QnDeviceWeight random_qn_weight(const WeightFormat& format, int64_t K, int64_t N, DType act, uint32_t seed,
                                cudaStream_t stream) {
  QnDeviceWeight w;
  w.act = act;
  const bool sparse = format.kind == FormatKind::S7;  // s7: pair bytes packed as q8 codes
  w.bits = sparse ? 8 : format.bits;
  w.sparse = sparse;
  w.group = format.group;
  w.N = N;
  w.K = K;
  w.Kw = sparse ? s7_words_per_row(K) : qn_words_per_row(K, format.bits);
  w.n_groups = group_count(format.group, K);
  int shift = 0;
  while ((int64_t(32) << shift) < group_size(format.group, K)) ++shift;
  w.group_shift = w.n_groups == 1 ? 30 : shift;
  // Freed by free_qn_weight, like an uploaded weight: random tiles, padding rows too.
  uint32_t* q = static_cast<uint32_t*>(device_weight_alloc(size_t(qn_padded_rows(N) * w.Kw) * 4));
  uint32_t* sb = static_cast<uint32_t*>(device_weight_alloc(size_t(qn_padded_rows(N) * w.n_groups) * 4));
  w.qweight = q;
  w.scale_bias = sb;
  fill_words(q, qn_padded_rows(N) * w.Kw, seed, stream);
  // scale and -zero*scale each a random value of 2^-5..2^-3 and either sign (fill_values)
  fill_values(reinterpret_cast<uint16_t*>(sb), 2 * qn_padded_rows(N) * w.n_groups, act, seed + 7, stream);
  gemv_qn_allow_shared_memory(w, "gemv benchmark (" + format.name() + ")");
  return w;
}

// The dense copy prefill makes before each cuBLAS GEMM (dequant_qn): read the packed weight,
// write N x K fp16/bf16. Its outputs rotate too, so a copy that fits in L2 is not timed as
// writes absorbed there.
void dequant_line(FILE* out, const std::string& name, DType act, const std::vector<QnDeviceWeight>& weights,
                  const GemvBenchOptions& options, double copy_gbs, cudaStream_t stream) {
  const QnDeviceWeight& w = weights.front();
  const size_t dense_bytes = size_t(w.N * w.K) * 2;
  const int dense_copies = copies_for(dense_bytes, options.rotation_bytes);
  std::vector<void*> dense(static_cast<size_t>(dense_copies));
  for (void*& d : dense) CUDA_CHECK(cudaMalloc(&d, dense_bytes));
  const int copies = int(weights.size());
  const double us = time_graph_us(stream, launches_for(copies * dense_copies), options.replays, [&](int i) {
    dequant_qn(weights[size_t(i % copies)], dense[size_t(i % dense_copies)], stream);
  });
  for (void* d : dense) CUDA_CHECK(cudaFree(d));
  const double total = double(w.weight_bytes()) + double(dense_bytes);
  std::fprintf(out, "dequant %s %s K=%lld N=%lld: %.1f us, %.0f GB/s, %.1f %% of copy\n", name.c_str(), act_name(act),
               (long long)w.K, (long long)w.N, us, total / (us * 1e3), 100.0 * total / (us * 1e3) / copy_gbs);
  std::fflush(out);
}

// Above kGemvQnMaxRows rows: gemm_qn (where it runs) and what QuantLinear runs otherwise,
// the dense copy + cuBLAS (one dense buffer: its copy is rewritten every launch, as in a
// prompt's layers).
void gemm_lines(FILE* out, const std::string& name, DType act, const std::vector<QnDeviceWeight>& weights, int M,
                const void* x, void* y, double dense_us, cublasHandle_t handle, const GemvBenchOptions& options,
                double copy_gbs, cudaStream_t stream) {
  const QnDeviceWeight& w = weights.front();
  const int copies = int(weights.size());
  const int64_t K = w.K, N = w.N;
  const double total = double(w.weight_bytes()) + double(M) * double(K + N) * 2;
  const auto line = [&](const char* what, double us) {
    std::fprintf(out, "gemm %s %s K=%lld N=%lld M=%d%s: %.1f us, %.0f GB/s, %.1f %% of copy, %.2fx cuBLAS\n",
                 name.c_str(), act_name(act), (long long)K, (long long)N, M, what, us, total / (us * 1e3),
                 100.0 * total / (us * 1e3) / copy_gbs, dense_us / us);
    std::fflush(out);
  };
  const size_t scratch_bytes = gemm_qn_scratch_bytes(w, M);
  if (scratch_bytes) {
    void* scratch = nullptr;
    CUDA_CHECK(cudaMalloc(&scratch, scratch_bytes));
    for (int warps : options.gemm_warps)
      for (int rows : options.gemm_rows)
        for (int splits : options.gemm_splits) {
          GemmQnConfig config;
          config.warps = warps;
          config.rows_x = rows;
          config.splits = splits;
          if (!gemm_qn_has_shape(w, config)) continue;  // a shape this width does not have
          const std::string setting = (warps ? " warps=" + std::to_string(warps) : std::string()) +
                                      (rows ? " rows_x=" + std::to_string(rows) : std::string()) +
                                      (splits ? " splits=" + std::to_string(splits) : std::string());
          line(setting.c_str(), time_graph_us(stream, launches_for(copies), options.replays, [&](int i) {
                 gemm_qn(weights[size_t(i % copies)], x, y, M, act, stream, scratch, scratch_bytes, config);
               }));
        }
    CUDA_CHECK(cudaFree(scratch));
  }
  if (M <= 4 * kGemvQnMaxRows) {  // QuantLinear's slices of gemv_qn (gemv_sliced_max_m)
    line(" via gemv slices", time_graph_us(stream, launches_for(copies), options.replays, [&](int i) {
           for (int m0 = 0; m0 < M; m0 += kGemvQnMaxRows)
             gemv_qn(weights[size_t(i % copies)], static_cast<const uint16_t*>(x) + int64_t(m0) * K,
                     static_cast<uint16_t*>(y) + int64_t(m0) * N, std::min(kGemvQnMaxRows, M - m0), act, stream);
         }));
  }
  void* dense = nullptr;
  CUDA_CHECK(cudaMalloc(&dense, size_t(N * K) * 2));
  const cudaDataType type = act == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.0f, beta = 0.0f;
  line(" via dequant+cublas", time_graph_us(stream, launches_for(copies), options.replays, [&](int i) {
         dequant_qn(weights[size_t(i % copies)], dense, stream);
         CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(N), M, int(K), &alpha, dense, type, int(K),
                                   x, type, int(K), &beta, y, type, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
       }));
  CUDA_CHECK(cudaFree(dense));
}

// GEMLITE_BENCH_{FORMATS,SHAPES,ACT,M,WARPS,STAGE_X,EPILOGUE} narrow a run: "q4g64,q2g64",
// "8192x8192,8192x57344", "fp16", "1,2,4,8", "4,8", "0,1", "plain,swiglu" (bench_util.h). GEMLITE_BENCH_WARM_L2=1
// times one weight copy read again by every launch instead of a cold L2: how much of a
// kernel's time is waiting on DRAM (an experiment's measure, not the table's).
GemvBenchOptions with_environment(GemvBenchOptions options) {
  env_strings("GEMLITE_BENCH_FORMATS", &options.formats);
  env_shapes("GEMLITE_BENCH_SHAPES", &options.shapes);
  env_activations("GEMLITE_BENCH_ACT", &options.activations);
  env_ints("GEMLITE_BENCH_M", &options.Ms);
  env_ints("GEMLITE_BENCH_WARPS", &options.warps_per_block);
  env_ints("GEMLITE_BENCH_STAGE_X", &options.stage_x);
  env_strings("GEMLITE_BENCH_EPILOGUE", &options.epilogues);
  env_ints("GEMLITE_BENCH_GEMM_WARPS", &options.gemm_warps);
  env_ints("GEMLITE_BENCH_GEMM_ROWS", &options.gemm_rows);
  env_ints("GEMLITE_BENCH_GEMM_SPLITS", &options.gemm_splits);
  if (env_flag("GEMLITE_BENCH_WARM_L2")) options.rotation_bytes = 0;
  return options;
}

// What the decode epilogues (GemvBenchOptions::epilogues) read and write besides x and y,
// for one shape: a pending norm's parts (ones: a finite scale), and a residual stream.
struct EpilogueBuffers {
  float* parts = nullptr;        // [M, ceil(K / 16)]: the producer's sums of squares
  float* norm_weight = nullptr;  // [N]
  void* residual = nullptr;      // [M, N] act; grows with the replays (to inf in fp16: the time does not depend on it)
  void* scaled = nullptr;        // [M, N] act
  float* sum_squares = nullptr;  // [M, ceil(N / 16)]
  QnPendingNorm norm;
  EpilogueBuffers(int M, int64_t K, int64_t N, cudaStream_t stream) {
    const int64_t parts_count = (K + 15) / 16;
    const std::vector<float> ones(size_t(std::max<int64_t>(M * parts_count, N)), 1.0f);
    CUDA_CHECK(cudaMalloc(&parts, size_t(M * parts_count) * 4));
    CUDA_CHECK(cudaMalloc(&norm_weight, size_t(N) * 4));
    CUDA_CHECK(cudaMalloc(&residual, size_t(M * N) * 2));
    CUDA_CHECK(cudaMalloc(&scaled, size_t(M * N) * 2));
    CUDA_CHECK(cudaMalloc(&sum_squares, size_t(M * ((N + 15) / 16)) * 4));
    CUDA_CHECK(cudaMemcpyAsync(parts, ones.data(), size_t(M * parts_count) * 4, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(norm_weight, ones.data(), size_t(N) * 4, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemsetAsync(residual, 0, size_t(M * N) * 2, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // `ones` leaves with this scope
    norm.sum_squares = parts;
    norm.parts = int(parts_count);
    norm.eps = 1e-5f;
  }
  ~EpilogueBuffers() {
    cudaFree(parts);
    cudaFree(norm_weight);
    cudaFree(residual);
    cudaFree(scaled);
    cudaFree(sum_squares);
  }
  EpilogueBuffers(const EpilogueBuffers&) = delete;
  EpilogueBuffers& operator=(const EpilogueBuffers&) = delete;
};

void launch_with_epilogue(const std::string& epilogue, const QnDeviceWeight& w, const void* x, void* y, int M,
                          DType act, const EpilogueBuffers& b, cudaStream_t stream, const GemvQnConfig& config) {
  if (epilogue == "plain") {
    gemv_qn(w, x, y, M, act, stream, config);
  } else if (epilogue == "norm") {
    gemv_qn(w, x, y, M, act, stream, config, &b.norm);
  } else if (epilogue == "swiglu") {
    QnDeviceWeight pair = w;  // random codes and scales: any row order is as random
    pair.paired_half = w.N / 2;
    gemv_qn_swiglu(pair, x, y, M, act, stream, config, &b.norm);
  } else if (epilogue == "residual") {
    gemv_qn_residual(w, x, b.residual, b.norm_weight, b.scaled, b.sum_squares, M, act, stream, config);
  }
}

}  // namespace

void run_gemv_benchmarks(FILE* out, const GemvBenchOptions& given) {
  const GemvBenchOptions options = with_environment(given);
  for (const std::string& epilogue : options.epilogues)
    if (epilogue != "plain" && epilogue != "norm" && epilogue != "swiglu" && epilogue != "residual")
      throw Error("gemlite-bench: unknown epilogue '" + epilogue + "' (expected plain, norm, swiglu or residual)");
  const BenchSession session(out);
  cudaStream_t stream = session.stream;
  cublasHandle_t handle = session.cublas;
  const double copy_gbs = session.copy_gbs;
  if (options.rotation_bytes == 0) std::fprintf(out, "L2: warm (GEMLITE_BENCH_WARM_L2=1, one weight copy)\n");
  for (const int M : options.Ms)
  for (DType act : options.activations) {
    for (const KernelShape& shape : options.shapes) {
      const int64_t K = shape.K, N = shape.N;
      void *x = nullptr, *y = nullptr;
      CUDA_CHECK(cudaMalloc(&x, size_t(M * K) * 2));
      CUDA_CHECK(cudaMalloc(&y, size_t(M * N) * 2));
      fill_values(static_cast<uint16_t*>(x), M * K, act, 3, stream);
      const EpilogueBuffers buffers(M, K, N, stream);
      const double io_bytes = double(M) * double(K + N) * 2;
      const double dense_us = cublas_us(handle, stream, act, K, N, M, x, y, options.rotation_bytes, options.replays);
      const double dense_bytes = double(N) * double(K) * 2 + io_bytes;
      std::fprintf(out, "cublas %s K=%lld N=%lld M=%d: %.1f us, %.0f GB/s, %.1f %% of copy\n", act_name(act),
                   (long long)K, (long long)N, M, dense_us, dense_bytes / (dense_us * 1e3),
                   100.0 * dense_bytes / (dense_us * 1e3) / copy_gbs);
      std::fflush(out);
      for (const std::string& name : options.formats) {
        const WeightFormat format = WeightFormat::parse(name);
        const QnDeviceWeight probe = random_qn_weight(format, K, N, act, 11, stream);
        const size_t bytes = probe.weight_bytes();
        const int copies = copies_for(bytes, options.rotation_bytes);
        std::vector<QnDeviceWeight> weights = {probe};
        for (int c = 1; c < copies; ++c) weights.push_back(random_qn_weight(format, K, N, act, 11 + 31 * uint32_t(c), stream));
        if (M > kGemvQnMaxRows) {
          gemm_lines(out, name, act, weights, M, x, y, dense_us, handle, options, copy_gbs, stream);
        } else {
          for (const std::string& epilogue : options.epilogues)
          for (int warps : options.warps_per_block)
          for (int stage_x : options.stage_x) {
            if (M > 1 && stage_x != options.stage_x.front()) continue;  // staging is M = 1's only
            if (epilogue == "swiglu" && N % 16 != 0) continue;            // pairs of 8 rows
            GemvQnConfig config;
            config.warps_per_block = warps;
            config.stage_x = stage_x;
            const double us = time_graph_us(stream, launches_for(copies), options.replays, [&](int i) {
              launch_with_epilogue(epilogue, weights[size_t(i % copies)], x, y, M, act, buffers, stream, config);
            });
            const double total = double(bytes) + io_bytes;
            std::string setting;
            if (epilogue != "plain") setting += " epilogue=" + epilogue;
            if (options.warps_per_block.size() > 1) setting += " warps=" + std::to_string(warps);
            if (M == 1 && options.stage_x.size() > 1) setting += " stage_x=" + std::to_string(stage_x);
            std::fprintf(out, "gemv %s %s K=%lld N=%lld M=%d%s: %.1f us, %.0f GB/s, %.1f %% of copy, %.2fx cuBLAS\n",
                         name.c_str(), act_name(act), (long long)K, (long long)N, M, setting.c_str(), us,
                         total / (us * 1e3), 100.0 * total / (us * 1e3) / copy_gbs, dense_us / us);
            std::fflush(out);
          }
        }
        if (M == options.Ms.front()) dequant_line(out, name, act, weights, options, copy_gbs, stream);
        for (QnDeviceWeight& w : weights) free_qn_weight(&w);
      }
      CUDA_CHECK(cudaFree(x));
      CUDA_CHECK(cudaFree(y));
    }
  }
}

}  // namespace gemlite
