#include "kernels/bench/fpx_bench.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "kernels/bench/bench_util.h"
#include "kernels/cuda_check.h"
#include "kernels/fpx/dequant_fpx.h"
#include "kernels/fpx/fpx_format.h"
#include "kernels/fpx/gemm_fpx.h"
#include "kernels/weight_format.h"

namespace gemlite {

namespace {

// factors [n] = 2^-7 .. 2^-5 (a row scale) times `power` (the kernel's power of two).
__global__ void fill_row_factors(float* factors, int64_t n, uint32_t seed, float power) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    factors[i] = power * (1.0f + float(bench_hash32(uint64_t(i), seed) & 0xFFFF) / 65536.0f) * 0.0078125f * 2.0f;
}

// ---- the sampled correctness check --------------------------------------------------

// The code of (n, k), read bit by bit from the layout comment of fpx_format.h (not from
// the kernel's code).
__device__ uint32_t packed_code(const uint8_t* packed, int64_t k_tiles, int bits, int64_t n, int64_t k) {
  const uint8_t* tile = packed + ((n / 16) * k_tiles + k / 128) * 256 * bits;
  const int r = int(n % 16), kk = int(k % 128);
  const int s = kk / 16, tig = kk % 16 / 4, e = kk % 4, gid = r % 8;
  const int lane = 4 * gid + tig, h = e / 2, byte = 2 * (e % 2) + (r < 8 ? 1 : 0);
  uint32_t code = 0;
  int off = 0, left = bits;
  for (int w = 4; w > 0; w /= 2) {
    while (left >= w) {
      const int chunk = w >= 2 ? 16 : 8;
      const int wi = s / (4 / w), u = (s % (4 / w)) * 2 + h;
      const uint8_t* word = tile + 256 * off + (wi * 4 / chunk) * 32 * chunk + lane * chunk + (wi % (chunk / 4)) * 4;
      const uint32_t value = uint32_t(word[0]) | uint32_t(word[1]) << 8 | uint32_t(word[2]) << 16 | uint32_t(word[3]) << 24;
      const int top = 8 * byte + 7 - u * w;
      code = code << w | (value >> (top - w + 1) & ((1u << w) - 1));
      off += w;
      left -= w;
    }
  }
  return code;
}

__device__ double decode_code(uint32_t code, int ebits, int mbits) {
  const uint32_t mantissa = code & ((1u << mbits) - 1);
  const int exponent = int(code >> mbits & ((1u << ebits) - 1));
  const int bias = (1 << (ebits - 1)) - 1;
  const double significand = exponent == 0 ? double(mantissa) : double(mantissa | 1u << mbits);
  const double magnitude = ldexp(significand, max(exponent, 1) - bias - mbits);
  return code >> (ebits + mbits) & 1 ? -magnitude : magnitude;
}

__device__ double to_double(uint16_t v, bool bf16) {
  if (bf16) return double(__uint_as_float(uint32_t(v) << 16));
  return double(__half2float(__ushort_as_half(v)));
}

// worst[sample] = |y - ref| / (u |ref| + 2^-14 S) for sampled (m, n); one thread each.
__global__ void check_samples(FpxDeviceWeight w, const uint16_t* x, const uint16_t* y, int M, uint32_t seed,
                              int samples, double* ratio) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= samples) return;
  const bool bf16 = w.act == DType::BF16;
  const int m = int(bench_hash32(uint64_t(i), seed) % uint32_t(M));
  const int64_t n = int64_t(bench_hash32(uint64_t(i), seed + 1) % uint32_t(w.N));
  double ref = 0, s = 0;
  for (int64_t k = 0; k < w.K; ++k) {
    const double p = decode_code(packed_code(w.packed, w.k_tiles, w.bits, n, k), w.ebits, w.mbits) *
                     to_double(x[int64_t(m) * w.K + k], bf16);
    ref += p;
    s += fabs(p);
  }
  const int bias = (1 << (w.ebits - 1)) - 1;
  const double scale = double(w.row_factor[n]) * (bf16 ? 1.0 : ldexp(1.0, bias - 15));
  ref *= scale;
  s *= fabs(scale);
  const double u = bf16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
  const double got = to_double(y[int64_t(m) * w.N + n], bf16);
  const double err = fabs(got - ref);
  ratio[i] = isfinite(got) ? err / (u * fabs(ref) + ldexp(s, -14) + 1e-30) : INFINITY;
}

double worst_sample_ratio(const FpxDeviceWeight& w, const void* x, const void* y, int M, cudaStream_t stream) {
  constexpr int kSamples = 256;
  double* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, kSamples * sizeof(double)));
  check_samples<<<kSamples / 64, 64, 0, stream>>>(w, static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(y),
                                                  M, 12345u + uint32_t(M), kSamples, d);
  CHECK_LAST_LAUNCH("check_samples");
  std::vector<double> h(kSamples);
  CUDA_CHECK(cudaMemcpyAsync(h.data(), d, kSamples * sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaFree(d));
  double worst = 0;
  for (double r : h) worst = std::isfinite(r) ? std::max(worst, r) : INFINITY;
  return worst;
}

FpxDeviceWeight random_fpx_weight(const WeightFormat& format, int64_t K, int64_t N, DType act, uint32_t seed,
                                  cudaStream_t stream) {
  FpxDeviceWeight w = alloc_fpx_weight(format, N, K, act);
  const int64_t words = w.row_blocks * w.k_tiles * fpx_tile_bytes(w.bits) / 4;
  // Random bits: every bit pattern of the packed layout is a valid set of codes.
  fill_words(const_cast<uint32_t*>(reinterpret_cast<const uint32_t*>(w.packed)), words, seed, stream);
  const int bias = (1 << (format.ebits - 1)) - 1;
  fill_row_factors<<<64, 256, 0, stream>>>(const_cast<float*>(w.row_factor), w.row_blocks * 16, seed + 3,
                                          act == DType::F16 ? std::ldexp(1.0f, 15 - bias) : 1.0f);
  CHECK_LAST_LAUNCH("fill_row_factors");
  return w;
}

FpxBenchOptions with_environment(FpxBenchOptions options) {
  env_strings("GEMLITE_BENCH_FPX_FORMATS", &options.formats);
  env_shapes("GEMLITE_BENCH_SHAPES", &options.shapes);
  env_activations("GEMLITE_BENCH_ACT", &options.activations);
  env_ints("GEMLITE_BENCH_M", &options.batch_sizes);
  env_ints("GEMLITE_BENCH_FPX_WARPS_K", &options.warps_k);
  env_ints("GEMLITE_BENCH_FPX_AHEAD", &options.tiles_ahead);
  env_ints("GEMLITE_BENCH_FPX_SPLITS", &options.splits);
  if (env_flag("GEMLITE_BENCH_FPX_SWEEP")) options.sweep_variants = true;
  return options;
}

}  // namespace

void run_fpx_benchmarks(FILE* out, const FpxBenchOptions& given) {
  const FpxBenchOptions options = with_environment(given);
  const BenchSession session(out);
  cudaStream_t stream = session.stream;
  cublasHandle_t handle = session.cublas;
  const double copy_gbs = session.copy_gbs;
  const int max_m = *std::max_element(options.batch_sizes.begin(), options.batch_sizes.end());

  for (DType act : options.activations) {
    for (const KernelShape& shape : options.shapes) {
      const int64_t K = shape.K, N = shape.N;
      void *x = nullptr, *y = nullptr;
      CUDA_CHECK(cudaMalloc(&x, size_t(max_m) * size_t(K) * 2));
      CUDA_CHECK(cudaMalloc(&y, size_t(max_m) * size_t(N) * 2));
      fill_values(static_cast<uint16_t*>(x), max_m * K, act, 3, stream);
      // cuBLAS: y [M, N] = x [M, K] · Wᵀ, W [N, K] row-major (torch.nn.functional.linear).
      const size_t dense_bytes = size_t(N) * size_t(K) * 2;
      const int dense_copies = copies_for(dense_bytes, options.rotation_bytes);
      std::vector<void*> dense(static_cast<size_t>(dense_copies));
      for (int c = 0; c < dense_copies; ++c) {
        CUDA_CHECK(cudaMalloc(&dense[size_t(c)], dense_bytes));
        fill_values(static_cast<uint16_t*>(dense[size_t(c)]), N * K, act, 100 + uint32_t(c), stream);
      }
      std::vector<std::vector<FpxDeviceWeight>> fpx(options.formats.size());
      for (size_t f = 0; f < options.formats.size(); ++f) {
        const WeightFormat format = WeightFormat::parse(options.formats[f]);
        fpx[f].push_back(random_fpx_weight(format, K, N, act, 11, stream));
        const int copies = copies_for(fpx[f][0].weight_bytes(), options.rotation_bytes);
        for (int c = 1; c < copies; ++c) fpx[f].push_back(random_fpx_weight(format, K, N, act, 11 + 31 * uint32_t(c), stream));
      }
      const cudaDataType type = act == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
      // The tiled kernel permutes x into this first (part of its time).
      void* scratch = nullptr;
      const size_t scratch_bytes = fpx.empty() ? 0 : gemm_fpx_scratch_bytes(fpx[0][0], max_m);
      if (scratch_bytes) CUDA_CHECK(cudaMalloc(&scratch, scratch_bytes));
      for (int M : options.batch_sizes) {
        const double io_bytes = double(M) * double(K + N) * 2;
        const float alpha = 1.0f, beta = 0.0f;
        const double dense_us = time_graph_us(stream, launches_for(dense_copies), options.replays, [&](int i) {
          CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(N), M, int(K), &alpha,
                                    dense[size_t(i % dense_copies)], type, int(K), x, type, int(K), &beta, y, type,
                                    int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        });
        const double dense_total = double(dense_bytes) + io_bytes;
        std::fprintf(out, "cublas %s K=%lld N=%lld M=%d: %.1f us, %.0f GB/s, %.1f %% of copy\n", act_name(act),
                     (long long)K, (long long)N, M, dense_us, dense_total / (dense_us * 1e3),
                     100.0 * dense_total / (dense_us * 1e3) / copy_gbs);
        std::fflush(out);
        for (size_t f = 0; f < options.formats.size(); ++f) {
          const std::vector<FpxDeviceWeight>& weights = fpx[f];
          const int copies = int(weights.size());
          std::vector<std::pair<std::string, GemmFpxConfig>> settings = {{"", GemmFpxConfig{}}};
          if (!options.warps_k.empty() || !options.tiles_ahead.empty() || !options.splits.empty()) {
            settings.clear();
            const std::vector<int> warps_k = options.warps_k.empty() ? std::vector<int>{0} : options.warps_k;
            // tiles_ahead applies to MT = 1 (M <= 8) only.
            const std::vector<int> ahead =
                options.tiles_ahead.empty() || M > 8 ? std::vector<int>{0} : options.tiles_ahead;
            const std::vector<int> splits = options.splits.empty() ? std::vector<int>{0} : options.splits;
            for (int w : warps_k)
              for (int a : ahead)
                for (int z : splits) {
                  GemmFpxConfig config;
                  config.warps_k = w;
                  config.tiles_ahead = a;
                  config.splits = z;
                  settings.push_back({(w ? " warps_k=" + std::to_string(w) : "") + (a ? " ahead=" + std::to_string(a) : "") +
                                          (z ? " splits=" + std::to_string(z) : ""),
                                      config});
                }
          }
          if (options.sweep_variants && M <= 8 && act == DType::F16) {
            GemmFpxConfig ahead1;
            ahead1.tiles_ahead = 1;
            settings.push_back({" ahead=1", ahead1});
          }
          if (options.sweep_variants && M > 8) {
            GemmFpxConfig mt2;
            mt2.m_tile = 2;
            mt2.tiled = 0;
            settings.push_back({" mt=2", mt2});
            for (int kernel : {1, 2, 3})  // the tiled kernel's shapes at each cluster size
              for (int splits : {1, 2, 4, 8}) {
                GemmFpxConfig tiled;
                tiled.tiled = kernel;
                tiled.splits = splits;
                static const char* const kNames[] = {"", " narrow splits=", " wide splits=", " tall splits="};
                settings.push_back({kNames[kernel] + std::to_string(splits), tiled});
              }
          }
          for (const auto& variant : settings) {
            const std::string& setting = variant.first;
            const GemmFpxConfig& config = variant.second;
            const double us = time_graph_us(stream, launches_for(copies), options.replays, [&](int i) {
              gemm_fpx(weights[size_t(i % copies)], x, y, M, act, stream, config, nullptr, scratch, scratch_bytes);
            });
            // The check reads the output of a fresh launch on copy 0.
            CUDA_CHECK(cudaMemsetAsync(y, 0xFF, size_t(M) * size_t(N) * 2, stream));
            gemm_fpx(weights[0], x, y, M, act, stream, config, nullptr, scratch, scratch_bytes);
            const double ratio = worst_sample_ratio(weights[0], x, y, M, stream);
            const double total = double(weights[0].weight_bytes()) + io_bytes;
            std::fprintf(out,
                         "fpx %s %s K=%lld N=%lld M=%d%s: %.1f us, %.0f GB/s, %.1f %% of copy, %.2fx cuBLAS, check %s (%.3f)\n",
                         options.formats[f].c_str(), act_name(act), (long long)K, (long long)N, M, setting.c_str(), us,
                         total / (us * 1e3), 100.0 * total / (us * 1e3) / copy_gbs, dense_us / us,
                         ratio <= 1.0 ? "ok" : "FAILED", ratio);
            std::fflush(out);
          }
          if (M > kFpxMaxM) {
            // What QuantLinear ran above kFpxMaxM before the tiled kernel (and still runs
            // above gemm_fpx_max_m: kFpxTiledMaxM on an H100, kFpxMaxM elsewhere): the
            // transient dense copy, then cuBLAS.
            const double us = time_graph_us(stream, launches_for(copies), options.replays, [&](int i) {
              dequant_fpx(weights[size_t(i % copies)], dense[0], stream);
              CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(N), M, int(K), &alpha, dense[0], type,
                                        int(K), x, type, int(K), &beta, y, type, int(N), CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
            });
            const double total = double(weights[0].weight_bytes()) + io_bytes;
            std::fprintf(out, "fpx %s %s K=%lld N=%lld M=%d via dequant+cublas: %.1f us, %.0f GB/s, %.1f %% of copy, %.2fx cuBLAS\n",
                         options.formats[f].c_str(), act_name(act), (long long)K, (long long)N, M, us,
                         total / (us * 1e3), 100.0 * total / (us * 1e3) / copy_gbs, dense_us / us);
            std::fflush(out);
          }
        }
      }
      for (auto& weights : fpx)
        for (FpxDeviceWeight& w : weights) free_fpx_weight(&w);
      for (void* d : dense) CUDA_CHECK(cudaFree(d));
      CUDA_CHECK(cudaFree(x));
      CUDA_CHECK(cudaFree(y));
      if (scratch) CUDA_CHECK(cudaFree(scratch));
    }
  }
}

}  // namespace gemlite
