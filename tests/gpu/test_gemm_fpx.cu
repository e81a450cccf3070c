// gemm_fpx (fp6 e3m2, fp5 e2m2) on the GPU:
//  - exact decoding: a weight holding every code (scale 1) times one-hot activations
//    returns each code's value bit-exactly, through every kernel variant (M = 1, 8, 16, 64)
//    and both activation types; this is also what shows that the tensor cores keep the
//    subnormal fp16/bf16 values the bit moves produce for the subnormal codes;
//  - random matrices at M = 1, 2, 3, 8, 17, 64, 128, 257, 512 for fp16 and bf16 against
//    the CPU reference (the library's row decoder, float64 accumulation), on shapes that
//    are multiples of nothing (K % 128 != 0, K % 4 != 0, N % 16 != 0), a split-K shape,
//    misaligned x and a bias.
//
// Tolerance, per output: |y - ref| <= u |ref| + 2^-14 S, S = sum_k |x_k w_k|, u = 2^-11
// (fp16 output) or 2^-8 (bf16). Why: the kernel's weights are the decoded codes exactly
// (bit moves, times powers of two) and x is the same fp16/bf16 value the reference uses, so
// every product is exact; what remains is the fp32 accumulation (K/16 chained mma adds + the
// split reductions, each <= 2^-23 S: 2^-15 S at K = 4096, the largest K here) and the one
// rounding of the output (u |y|). A wrong lane, plane or shift errs by ~|x w| per weight,
// far above both. Outputs are poisoned with 0xFF bytes (NaN) before every launch.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "tests/gpu/gpu_test_helpers.h"
#include "tests/gpu/reference_products.h"
#include "kernels/fpx/dequant_fpx.h"
#include "kernels/fpx/fpx_format.h"
#include "kernels/fpx/gemm_fpx.h"
#include "kernels/packed_weight.h"
#include "kernels/weight_format.h"
#include "runtime/dtype.h"

namespace gemlite {
namespace {

uint16_t to_bits(float v, DType act) { return act == DType::BF16 ? float_to_bf16(v) : float_to_half(v); }
float from_bits(uint16_t v, DType act) { return act == DType::BF16 ? bf16_to_float(v) : half_to_float(v); }

// y [M, N] = gemm_fpx(x [M, K]) with y poisoned first; x copied to an offset of
// `x_offset` elements into its buffer (an odd offset makes it misaligned).
std::vector<uint16_t> run_gemm(const FpxDeviceWeight& dw, const std::vector<uint16_t>& x, int64_t M, DType act,
                               cudaStream_t stream, int x_offset = 0, const GemmFpxConfig& config = {}) {
  const int64_t N = dw.N;
  DeviceBuffer dx((x.size() + size_t(x_offset)) * 2), dy(size_t(M * N) * 2);
  uint16_t* x_dev = static_cast<uint16_t*>(dx.ptr) + x_offset;
  CUDA_CHECK(cudaMemcpyAsync(x_dev, x.data(), x.size() * 2, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemsetAsync(dy.ptr, 0xFF, size_t(M * N) * 2, stream));
  // The tiled kernel's permuted x, poisoned too (NaN bits): it must be written before it is read.
  const size_t scratch_bytes = gemm_fpx_scratch_bytes(dw, int(M));
  DeviceBuffer scratch(std::max<size_t>(scratch_bytes, 16));
  CUDA_CHECK(cudaMemsetAsync(scratch.ptr, 0xFF, std::max<size_t>(scratch_bytes, 16), stream));
  gemm_fpx(dw, x_dev, dy.ptr, int(M), act, stream, config, nullptr, scratch_bytes ? scratch.ptr : nullptr,
           scratch_bytes);
  std::vector<uint16_t> y(size_t(M * N));
  CUDA_CHECK(cudaMemcpyAsync(y.data(), dy.ptr, y.size() * 2, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return y;
}

TEST(GemmFpxDecoding, EveryCodeIsExact) {
  StreamGuard stream;
  for (const char* name : {"fp6", "fp5"}) {
    const WeightFormat format = WeightFormat::parse(name);
    const int codes = 1 << format.bits;
    // Row n, column k holds code (n + k) % codes: every row has every code, so its absmax
    // is the largest finite value and its fp16 scale exactly 1.
    const int64_t N = 64, K = 64;
    std::vector<float> w(size_t(N * K));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        w[size_t(n * K + k)] = fpx_decode(uint8_t((n + k) % codes), format.ebits, format.mbits);
    const PackedWeight packed = quantize_weight(w.data(), N, K, format);
    for (int64_t n = 0; n < N; ++n) ASSERT_EQ(half_to_float(packed.part("scales").as<uint16_t>()[n]), 1.0f);
    for (DType act : {DType::F16, DType::BF16}) {
      FpxDeviceWeight dw = upload_fpx_weight(packed, act);
      for (int64_t M : {1, 8, 16, 64}) {
        for (int64_t first = 0; first < K; first += M) {  // x rows = identity rows first .. first + M - 1
          std::vector<uint16_t> x(size_t(M * K), 0);
          for (int64_t m = 0; m < M; ++m) x[size_t(m * K + first + m)] = to_bits(1.0f, act);
          const std::vector<uint16_t> y = run_gemm(dw, x, M, act, stream.stream);
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              const float expected = w[size_t(n * K + first + m)];
              ASSERT_EQ(from_bits(y[size_t(m * N + n)], act), expected)
                  << name << " " << dtype_name(act) << " M=" << M << " code " << (n + first + m) % codes;
            }
        }
      }
      free_fpx_weight(&dw);
    }
  }
}

struct CheckResult {
  double worst_ratio = 0;  // max |y - ref| / (u |ref| + 2^-14 S): <= 1 passes
  int64_t failures = 0;
  std::string first_failure;
};

CheckResult check_random(const PackedWeight& packed, const FpxDeviceWeight& dw, DType act, int64_t M,
                         std::mt19937_64& rng, cudaStream_t stream, int x_offset = 0,
                         const GemmFpxConfig& config = {}) {
  const int64_t N = packed.rows, K = packed.cols;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> x(size_t(M * K));
  std::vector<double> xv(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = to_bits(normal(rng), act);
    xv[i] = from_bits(x[i], act);
  }
  const std::vector<uint16_t> y = run_gemm(dw, x, M, act, stream, x_offset, config);
  const float* bias = packed.parts.count("bias") ? packed.part("bias").as<float>() : nullptr;
  const double u = act == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  std::vector<double> products, magnitudes;
  reference_products(packed, xv, M, &products, &magnitudes);
  CheckResult result;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      const double ref = (bias ? bias[n] : 0.0) + products[size_t(m * N + n)], s = magnitudes[size_t(m * N + n)];
      const float got = from_bits(y[size_t(m * N + n)], act);
      const double tol = u * std::abs(ref) + std::ldexp(s, -14) + 1e-30;
      const double ratio = std::isfinite(got) ? std::abs(double(got) - ref) / tol : INFINITY;
      result.worst_ratio = std::max(result.worst_ratio, ratio);
      if (!(ratio <= 1) && result.failures++ == 0)
        result.first_failure = "y[" + std::to_string(m) + ", " + std::to_string(n) + "] = " + std::to_string(got) +
                               ", reference " + std::to_string(ref) + ", error / tolerance " + std::to_string(ratio);
    }
  }
  return result;
}

struct Shape {
  int64_t N, K;
};

class GemmFpxTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GemmFpxTest, MatchesCpuReferenceAtEveryBatchSize) {
  const WeightFormat format = WeightFormat::parse(GetParam());
  std::mt19937_64 rng(test_seed() * 7919 + uint64_t(format.bits));
  StreamGuard stream;
  // K = 1000: a partial last tile; K = 515: K % 4 != 0 (scalar x loads) and N % 16 != 0;
  // N = 1024, K = 4096: few row blocks, so small M splits K over blocks.
  for (const Shape shape : {Shape{300, 1000}, Shape{77, 515}, Shape{1024, 4096}}) {
    const std::vector<float> w = random_weight(shape.N, shape.K, rng, false);
    const PackedWeight packed = quantize_weight(w.data(), shape.N, shape.K, format);
    for (DType act : {DType::F16, DType::BF16}) {
      FpxDeviceWeight dw = upload_fpx_weight(packed, act);
      double worst = 0;
      for (int64_t M : {1, 2, 3, 8, 17, 64, 128, 257, 512}) {
        if (shape.K == 4096 && M > 128) continue;  // keeps the float64 reference short
        SCOPED_TRACE(format.name() + " " + dtype_name(act) + " N=" + std::to_string(shape.N) +
                     " K=" + std::to_string(shape.K) + " M=" + std::to_string(M) + " seed=" + std::to_string(test_seed()));
        const CheckResult r = check_random(packed, dw, act, M, rng, stream.stream);
        EXPECT_EQ(r.failures, 0) << r.first_failure;
        worst = std::max(worst, r.worst_ratio);
      }
      std::cout << "[gemm_fpx] " << format.name() << " " << dtype_name(act) << " N=" << shape.N << " K=" << shape.K
                << ": worst error / tolerance " << worst << " (max_splits " << dw.max_splits << ")\n";
      free_fpx_weight(&dw);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GemmFpxTest, ::testing::Values("fp6", "fp5"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// Off an H100 running the sm_90a build the tiled kernel does not run, and a launch forcing
// it falls back to the register kernel: the tests of the tiled shapes skip there, visibly,
// instead of passing on the other kernel.
bool tiled_kernel_runs_here() {
  const std::vector<float> w(16 * 128, 1.0f);
  const PackedWeight packed = quantize_weight(w.data(), 16, 128, WeightFormat::parse("fp6"));
  FpxDeviceWeight dw = upload_fpx_weight(packed, DType::F16);
  const bool runs = gemm_fpx_max_m(dw) > kFpxMaxM;
  free_fpx_weight(&dw);
  return runs;
}

// Misaligned x (odd element offset: scalar loads), a bias added after the reduction, and
// every split-K and n-tile setting of the register kernel, warps per block 1, 2, 3, 4, 5,
// 6, 8 and 16 (every automatic choice and more), on one shape.
TEST(GemmFpxEdges, MisalignedActivationsBiasAndLaunchSettings) {
  std::mt19937_64 rng(test_seed() + 5);
  StreamGuard stream;
  const WeightFormat format = WeightFormat::parse("fp6");
  const int64_t N = 520, K = 2048;
  const std::vector<float> w = random_weight(N, K, rng, false);
  PackedWeight packed = quantize_weight(w.data(), N, K, format);
  add_random_bias(&packed, rng);
  for (DType act : {DType::F16, DType::BF16}) {
    FpxDeviceWeight dw = upload_fpx_weight(packed, act);
    for (int64_t M : {1, 5, 16, 40, 70}) {
      SCOPED_TRACE(std::string(dtype_name(act)) + " M=" + std::to_string(M));
      CheckResult r = check_random(packed, dw, act, M, rng, stream.stream, 1);
      EXPECT_EQ(r.failures, 0) << "misaligned: " << r.first_failure;
      for (int splits = 1; splits <= dw.max_splits; splits *= 2)
        for (int warps_k : {1, 2, 3, 4, 5, 6, 8, 16}) {
          GemmFpxConfig config;
          config.splits = splits;
          config.warps_k = warps_k;
          config.tiled = 0;
          r = check_random(packed, dw, act, M, rng, stream.stream, 0, config);
          EXPECT_EQ(r.failures, 0) << "splits " << splits << " warps_k " << warps_k << ": " << r.first_failure;
        }
      for (int m_tile : {1, 2, 4, 8})  // every register-kernel variant, whatever M picks
        for (int ahead : {1, 2}) {
          GemmFpxConfig config;
          config.m_tile = m_tile;
          config.tiled = 0;
          config.tiles_ahead = ahead;
          r = check_random(packed, dw, act, M, rng, stream.stream, 0, config);
          EXPECT_EQ(r.failures, 0) << "m_tile " << m_tile << " tiles_ahead " << ahead << ": " << r.first_failure;
        }
    }
    free_fpx_weight(&dw);
  }
}

// Whether an automatic gemm_fpx at M wrote the scratch it was given (poisoned first): the
// tiled kernel's copy of x (x all ones, whose fp16 / bf16 bits are not the poison's). With
// `norm`, a pending RMSNorm (sums of squares of ones); `splits`: a register-kernel split-K.
bool writes_scratch(const FpxDeviceWeight& dw, DType act, int M, cudaStream_t stream, bool norm, int splits = 0) {
  const uint16_t one = act == DType::BF16 ? float_to_bf16(1.0f) : float_to_half(1.0f);
  const std::vector<uint16_t> x(size_t(M) * size_t(dw.K), one);
  const int64_t parts = gemm_fpx_norm_parts(dw);
  const std::vector<float> sum_squares(size_t(M * parts), 1.0f);
  const size_t scratch_bytes = gemm_fpx_scratch_bytes(dw, M);
  DeviceBuffer dx(x.size() * 2), dy(size_t(M) * size_t(dw.N) * 2), dss(sum_squares.size() * 4), scratch(scratch_bytes);
  CUDA_CHECK(cudaMemcpyAsync(dx.ptr, x.data(), x.size() * 2, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(dss.ptr, sum_squares.data(), sum_squares.size() * 4, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemsetAsync(scratch.ptr, 0xFF, scratch_bytes, stream));
  const QnPendingNorm pending{static_cast<const float*>(dss.ptr), int(parts), 1e-5f};
  GemmFpxConfig config;
  config.splits = splits;
  gemm_fpx(dw, dx.ptr, dy.ptr, M, act, stream, config, norm ? &pending : nullptr, scratch.ptr, scratch_bytes);
  std::vector<uint16_t> image(std::min<size_t>(scratch_bytes / 2, 4096));
  CUDA_CHECK(cudaMemcpyAsync(image.data(), scratch.ptr, image.size() * 2, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::any_of(image.begin(), image.end(), [](uint16_t v) { return v != 0xFFFF; });
}

// Both tiled shapes forced at small M (the register kernel's M: 1 .. 70), at every
// cluster size, with a bias (the register kernel's settings are the test above's); and the
// automatic launch at M 9..16 on a wide weight, which takes the tiled kernel.
TEST(GemmFpxEdges, TiledKernelsAtSmallM) {
  if (!tiled_kernel_runs_here()) GTEST_SKIP() << "the tiled kernel needs an H100 (sm_90a)";
  std::mt19937_64 rng(test_seed() + 7);
  StreamGuard stream;
  const int64_t N = 520, K = 2048;
  const std::vector<float> w = random_weight(N, K, rng, false);
  PackedWeight packed = quantize_weight(w.data(), N, K, WeightFormat::parse("fp6"));
  add_random_bias(&packed, rng);
  for (DType act : {DType::F16, DType::BF16}) {
    FpxDeviceWeight dw = upload_fpx_weight(packed, act);
    for (int64_t M : {1, 5, 16, 40, 70})
      for (int splits : {1, 2, 4, 8})
        for (int kernel : {1, 2}) {
          SCOPED_TRACE(std::string(dtype_name(act)) + " M=" + std::to_string(M));
          GemmFpxConfig tiled;
          tiled.tiled = kernel;
          tiled.splits = splits;
          const CheckResult r = check_random(packed, dw, act, M, rng, stream.stream, 0, tiled);
          EXPECT_EQ(r.failures, 0) << (kernel == 1 ? "tiled" : "wide") << ", splits " << splits << ": "
                                   << r.first_failure;
        }
    EXPECT_FALSE(gemm_fpx_runs_tiled(dw, 16)) << "N = 520 < 3.5 K: the register kernel at M = 16";
    free_fpx_weight(&dw);
  }
  // The automatic launch on a wide weight at M 9..16: the tiled kernel (fpx_tiled_at_small_m:
  // N >= 3.5 K, and 112 blocks of 16 row blocks fill 85 % of a wave), with the scratch as
  // the runtime gives it.
  const int64_t wide_N = 28672, wide_K = 1024;
  const std::vector<float> wide_w = random_weight(wide_N, wide_K, rng, false);
  const PackedWeight wide = quantize_weight(wide_w.data(), wide_N, wide_K, WeightFormat::parse("fp6"));
  for (DType act : {DType::F16, DType::BF16}) {
    FpxDeviceWeight dw = upload_fpx_weight(wide, act);
    EXPECT_TRUE(gemm_fpx_runs_tiled(dw, 16));
    EXPECT_FALSE(gemm_fpx_runs_tiled(dw, 8));
    for (int64_t M : {9, 13, 16}) {
      SCOPED_TRACE(std::string(dtype_name(act)) + " automatic, N = 28672, K = 1024, M=" + std::to_string(M));
      const CheckResult r = check_random(wide, dw, act, M, rng, stream.stream);
      EXPECT_EQ(r.failures, 0) << r.first_failure;
      EXPECT_TRUE(writes_scratch(dw, act, int(M), stream.stream, false)) << "the tiled kernel did not run";
    }
    // A fused RMSNorm (the model's decode and short prompts) keeps the register kernel, which
    // alone has that epilogue, even given a scratch; so does a split-K asked of it.
    EXPECT_FALSE(writes_scratch(dw, act, 16, stream.stream, true));
    EXPECT_FALSE(writes_scratch(dw, act, 16, stream.stream, false, 2));
    free_fpx_weight(&dw);
  }
}

// A small case of the tiled kernel's shapes (two chunks of 64 x rows, or one of 128 with
// rows past M, a partial last tile of K, 3 tiles over clusters of up to 8 blocks: some
// blocks get no tile; N odd: the epilogue's one-output stores), quick enough for
// compute-sanitizer racecheck.
TEST(GemmFpxEdges, TiledKernelSmall) {
  if (!tiled_kernel_runs_here()) GTEST_SKIP() << "the tiled kernel needs an H100 (sm_90a)";
  std::mt19937_64 rng(test_seed() + 9);
  StreamGuard stream;
  const int64_t N = 41, K = 328;
  const std::vector<float> w = random_weight(N, K, rng, false);
  const PackedWeight packed = quantize_weight(w.data(), N, K, WeightFormat::parse("fp6"));
  for (DType act : {DType::F16, DType::BF16}) {
    FpxDeviceWeight dw = upload_fpx_weight(packed, act);
    for (int splits : {1, 8})
      for (int kernel : {1, 2, 3}) {
        GemmFpxConfig tiled;
        tiled.tiled = kernel;
        tiled.splits = splits;
        const CheckResult r = check_random(packed, dw, act, 70, rng, stream.stream, 0, tiled);
        EXPECT_EQ(r.failures, 0) << dtype_name(act) << " shape " << kernel << " splits " << splits
                                 << ": " << r.first_failure;
      }
    free_fpx_weight(&dw);
  }
}

// The tiled kernel's wide shapes (128 x rows a block, x permuted first; 128 or 256 rows of
// W) as fpx_tiled_launch picks them (automatic) and each forced at cluster sizes 1, 2, 4, 8:
// one, two and three chunks of x rows with rows past M, a partial last tile of K (split 8
// ways: some blocks get no tile), a partial last group of 8 or 16 row blocks.
TEST(GemmFpxEdges, WideKernel) {
  if (!tiled_kernel_runs_here()) GTEST_SKIP() << "the tiled kernel needs an H100 (sm_90a)";
  std::mt19937_64 rng(test_seed() + 11);
  StreamGuard stream;
  const int64_t N = 1000, K = 1000;
  for (const char* name : {"fp6", "fp5"}) {
    const std::vector<float> w = random_weight(N, K, rng, false);
    const PackedWeight packed = quantize_weight(w.data(), N, K, WeightFormat::parse(name));
    for (DType act : {DType::F16, DType::BF16}) {
      FpxDeviceWeight dw = upload_fpx_weight(packed, act);
      for (int64_t M : {int64_t(kFpxNarrowMaxM) + 1, int64_t(256), int64_t(300)})
        for (int kernel : {-1, 2, 3})
          for (int splits : {0, 1, 2, 4, 8}) {
            if ((kernel < 0) != (splits == 0)) continue;  // automatic: shape and splits both
            GemmFpxConfig wide;
            wide.tiled = kernel;
            wide.splits = splits;
            const CheckResult r = check_random(packed, dw, act, M, rng, stream.stream, 0, wide);
            EXPECT_EQ(r.failures, 0) << name << " " << dtype_name(act) << " M=" << M
                                     << (wide.tiled < 0 ? " automatic" : " shape " + std::to_string(kernel))
                                     << " splits " << splits << ": " << r.first_failure;
          }
      free_fpx_weight(&dw);
    }
  }
}

// The RMSNorm fused into gemm_fpx (gemm_fpx_residual, then gemm_fpx with a pending norm),
// the contract of gemv_qn's fused norm: the residual r + x · W1ᵀ within the tolerance above
// (its one rounding is the sum's); scaled = residual ∘ g exactly as rounded; the parts add
// up to Σ residual² per row (fp32 sums of 16 squares, then of the parts: 1e-5 relative);
// the next projection within the tolerance of inv_rms (scaled · W2ᵀ) + bias, plus 1e-5 of
// |inv_rms (scaled · W2ᵀ)| for the fp32 rsqrt and sums. Shapes: a split-K producer (D =
// 256: 16 row blocks) and a split-K consumer (N2 = 1000 at K = 4096), awkward K and N;
// M up to kFpxMaxM (two n-tiles).
TEST(GemmFpxFusedNorm, ResidualThenPendingNormMatchFloat64) {
  std::mt19937_64 rng(test_seed() + 61);
  StreamGuard stream;
  struct Case {
    int64_t K_in, D, N_next;  // producer [D, K_in], next projection [N_next, D]
    DType act;
  };
  // D = 4112: 257 parts, one past what the register kernel's warps load right after the PDL
  // wait (it falls back to reading them after the loop); D = 4096: 256 parts, loaded early.
  for (const Case c : {Case{4096, 4096, 1000, DType::F16}, Case{8192, 256, 200, DType::BF16},
                       Case{200, 1000, 24, DType::F16}, Case{64, 40, 16, DType::BF16},
                       Case{64, 4112, 24, DType::BF16}}) {
    const int64_t D = c.D, K = c.K_in, N2 = c.N_next;
    const float eps = 1e-5f;
    const double u = c.act == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    std::vector<float> w1 = random_weight(D, K, rng, false), w2 = random_weight(N2, D, rng, false);
    for (float& v : w1) v *= 1.0f / 32;  // keeps the residual inside fp16's range at K = 8192
    const PackedWeight p1 = quantize_weight(w1.data(), D, K, WeightFormat::parse("fp6"));
    PackedWeight p2 = quantize_weight(w2.data(), N2, D, WeightFormat::parse("fp5"));
    const std::vector<float> bias = add_random_bias(&p2, rng);
    FpxDeviceWeight d1 = upload_fpx_weight(p1, c.act), d2 = upload_fpx_weight(p2, c.act);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(static_cast<size_t>(D));
    std::uniform_real_distribution<float> around_one(0.5f, 1.5f);
    for (float& v : g) v = around_one(rng);
    DeviceBuffer dg(size_t(D) * 4);
    CUDA_CHECK(cudaMemcpyAsync(dg.ptr, g.data(), g.size() * 4, cudaMemcpyHostToDevice, stream.stream));
    const int64_t parts = gemm_fpx_norm_parts(d1);
    EXPECT_EQ(parts, (D + 15) / 16);
    std::cout << "[gemm_fpx fused norm] K=" << K << " D=" << D << " N2=" << N2 << ": max_splits " << d1.max_splits
              << " / " << d2.max_splits << "\n";
    // The split-K epilogues are covered: the producer splits at D = 256, the consumer at N2 = 1000.
    if (D == 256) EXPECT_GT(d1.max_splits, 1);
    if (N2 == 1000) EXPECT_GT(d2.max_splits, 1);
    for (int M : {1, 3, 8, 16}) {
      SCOPED_TRACE(std::string(dtype_name(c.act)) + " K=" + std::to_string(K) + " D=" + std::to_string(D) +
                   " M=" + std::to_string(M) + " seed=" + std::to_string(test_seed()));
      std::vector<uint16_t> x_bits(size_t(M * K)), r_bits(size_t(M * D));
      std::vector<double> x(x_bits.size()), r(r_bits.size());
      for (size_t i = 0; i < x.size(); ++i) x[i] = from_bits(x_bits[i] = to_bits(normal(rng), c.act), c.act);
      for (size_t i = 0; i < r.size(); ++i) r[i] = from_bits(r_bits[i] = to_bits(normal(rng), c.act), c.act);
      DeviceBuffer dx(x_bits.size() * 2), dr(r_bits.size() * 2), dscaled(size_t(M * D) * 2),
          dss(size_t(M * parts) * 4), dy(size_t(M * N2) * 2);
      CUDA_CHECK(cudaMemcpyAsync(dx.ptr, x_bits.data(), x_bits.size() * 2, cudaMemcpyHostToDevice, stream.stream));
      CUDA_CHECK(cudaMemcpyAsync(dr.ptr, r_bits.data(), r_bits.size() * 2, cudaMemcpyHostToDevice, stream.stream));
      CUDA_CHECK(cudaMemsetAsync(dscaled.ptr, 0xFF, size_t(M * D) * 2, stream.stream));  // NaN
      CUDA_CHECK(cudaMemsetAsync(dss.ptr, 0xFF, size_t(M * parts) * 4, stream.stream));
      CUDA_CHECK(cudaMemsetAsync(dy.ptr, 0xFF, size_t(M * N2) * 2, stream.stream));
      gemm_fpx_residual(d1, dx.ptr, dr.ptr, static_cast<const float*>(dg.ptr), dscaled.ptr,
                        static_cast<float*>(dss.ptr), M, c.act, stream.stream);
      const QnPendingNorm norm{static_cast<const float*>(dss.ptr), int(parts), eps};
      gemm_fpx(d2, dscaled.ptr, dy.ptr, M, c.act, stream.stream, {}, &norm);
      std::vector<uint16_t> r_out(size_t(M * D)), scaled(size_t(M * D)), y(size_t(M * N2));
      std::vector<float> ss(size_t(M * parts));
      CUDA_CHECK(cudaMemcpyAsync(r_out.data(), dr.ptr, r_out.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
      CUDA_CHECK(cudaMemcpyAsync(scaled.data(), dscaled.ptr, scaled.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
      CUDA_CHECK(cudaMemcpyAsync(ss.data(), dss.ptr, ss.size() * 4, cudaMemcpyDeviceToHost, stream.stream));
      CUDA_CHECK(cudaMemcpyAsync(y.data(), dy.ptr, y.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
      CUDA_CHECK(cudaStreamSynchronize(stream.stream));

      std::vector<double> y1, s1;
      reference_products(p1, x, M, &y1, &s1);
      int64_t bad = 0;
      for (int64_t i = 0; i < M * D; ++i) {
        const double want = r[size_t(i)] + y1[size_t(i)], got = from_bits(r_out[size_t(i)], c.act);
        if (!(std::abs(got - want) <= u * std::abs(want) + std::ldexp(s1[size_t(i)], -14) + 1e-30) && bad++ == 0)
          ADD_FAILURE() << "residual[" << i << "] = " << got << ", reference " << want;
      }
      EXPECT_EQ(bad, 0);
      std::vector<double> scaled_values(size_t(M * D)), inv_rms(static_cast<size_t>(M));
      for (int64_t m = 0; m < M; ++m) {
        double sum_squares = 0;
        for (int64_t n = 0; n < D; ++n) {
          const size_t i = size_t(m * D + n);
          const float v = from_bits(r_out[i], c.act);
          sum_squares += double(v) * v;
          scaled_values[i] = from_bits(scaled[i], c.act);
          ASSERT_EQ(scaled[i], to_bits(v * g[size_t(n)], c.act)) << "scaled[" << m << ", " << n << "]";
        }
        double parts_sum = 0;
        for (int64_t p = 0; p < parts; ++p) parts_sum += ss[size_t(m * parts + p)];
        EXPECT_NEAR(parts_sum, sum_squares, 1e-5 * sum_squares) << "row " << m;
        inv_rms[size_t(m)] = 1.0 / std::sqrt(sum_squares / double(D) + eps);
      }
      std::vector<double> y2, s2;
      reference_products(p2, scaled_values, M, &y2, &s2);
      bad = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N2; ++n) {
          const size_t i = size_t(m * N2 + n);
          const double dot = inv_rms[size_t(m)] * y2[i], want = dot + bias[size_t(n)];
          const double got = from_bits(y[i], c.act);
          const double tol = u * std::abs(want) + inv_rms[size_t(m)] * std::ldexp(s2[i], -14) + 1e-5 * std::abs(dot);
          if (!(std::abs(got - want) <= tol) && bad++ == 0)
            ADD_FAILURE() << "y[" << m << ", " << n << "] = " << got << ", reference " << want;
        }
      EXPECT_EQ(bad, 0);
    }
    free_fpx_weight(&d1);
    free_fpx_weight(&d2);
  }
  // Beyond the decode batch the epilogues are refused, not run on a kernel without them.
  const std::vector<float> w(32 * 64, 0.5f);
  FpxDeviceWeight dw = upload_fpx_weight(quantize_weight(w.data(), 32, 64, WeightFormat::parse("fp6")), DType::F16);
  const QnPendingNorm norm{reinterpret_cast<const float*>(16), 2, 1e-5f};
  EXPECT_THROW(gemm_fpx(dw, nullptr, nullptr, kFpxMaxM + 1, DType::F16, nullptr, {}, &norm), Error);
  EXPECT_THROW(gemm_fpx_residual(dw, nullptr, reinterpret_cast<void*>(16), reinterpret_cast<const float*>(16), nullptr,
                                 reinterpret_cast<float*>(16), kFpxMaxM + 1, DType::F16, nullptr),
               Error);
  free_fpx_weight(&dw);
}

// dequant_fpx (the transient dense copy of prefill) against the host's row decoder rounded
// to the activation type: equal bit for bit (both round the exact product of a code's
// value and its row's fp16 scale once). Awkward shapes: a partial last tile of K, K % 4 !=
// 0 (scalar stores), N % 16 != 0 (rows of the last row block past N left untouched).
TEST(DequantFpx, EqualsTheHostDecoderBitwise) {
  std::mt19937_64 rng(test_seed() + 71);
  StreamGuard stream;
  for (const char* name : {"fp6", "fp5"})
    for (const Shape shape : {Shape{300, 1000}, Shape{77, 515}, Shape{1024, 4096}, Shape{16, 128}}) {
      const int64_t N = shape.N, K = shape.K;
      const std::vector<float> w = random_weight(N, K, rng, false);
      const PackedWeight packed = quantize_weight(w.data(), N, K, WeightFormat::parse(name));
      std::vector<float> decoded(size_t(N * K));
      const RowDecoder decode = make_row_decoder(packed);
      for (int64_t n = 0; n < N; ++n) decode(n, &decoded[size_t(n * K)]);
      for (DType act : {DType::F16, DType::BF16}) {
        SCOPED_TRACE(std::string(name) + " " + dtype_name(act) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
        FpxDeviceWeight dw = upload_fpx_weight(packed, act);
        // One row of slack past the end, poisoned: a store past N x K shows there.
        DeviceBuffer out(size_t((N + 1) * K) * 2);
        CUDA_CHECK(cudaMemsetAsync(out.ptr, 0xFF, size_t((N + 1) * K) * 2, stream.stream));
        dequant_fpx(dw, out.ptr, stream.stream);
        std::vector<uint16_t> got(size_t((N + 1) * K));
        CUDA_CHECK(cudaMemcpyAsync(got.data(), out.ptr, got.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
        CUDA_CHECK(cudaStreamSynchronize(stream.stream));
        free_fpx_weight(&dw);
        int64_t failures = 0;
        for (int64_t i = 0; i < N * K; ++i)
          if (got[size_t(i)] != to_bits(decoded[size_t(i)], act) && failures++ == 0)
            ADD_FAILURE() << "w[" << i / K << ", " << i % K << "]: host " << decoded[size_t(i)] << " gpu "
                          << from_bits(got[size_t(i)], act);
        EXPECT_EQ(failures, 0);
        EXPECT_TRUE(std::all_of(got.begin() + N * K, got.end(), [](uint16_t v) { return v == 0xFFFF; }))
            << "written past the last row";
      }
    }
}

TEST(GemmFpxEdges, RejectsWrongInputs) {
  const std::vector<float> w(16 * 64, 0.5f);
  const PackedWeight packed = quantize_weight(w.data(), 16, 64, WeightFormat::parse("fp6"));
  EXPECT_THROW(upload_fpx_weight(packed, DType::F32), Error);
  const PackedWeight q4 = quantize_weight(w.data(), 16, 64, WeightFormat::parse("q4g64"));
  EXPECT_THROW(upload_fpx_weight(q4, DType::F16), Error);
  FpxDeviceWeight dw = upload_fpx_weight(packed, DType::F16);
  EXPECT_THROW(gemm_fpx(dw, nullptr, nullptr, 0, DType::F16, nullptr), Error);
  EXPECT_THROW(gemm_fpx(dw, nullptr, nullptr, 1, DType::BF16, nullptr), Error);
  GemmFpxConfig bad;
  bad.m_tile = 3;
  EXPECT_THROW(gemm_fpx(dw, nullptr, nullptr, 1, DType::F16, nullptr, bad), Error);
  GemmFpxConfig bad_tiled;
  bad_tiled.tiled = 4;
  EXPECT_THROW(gemm_fpx(dw, nullptr, nullptr, 32, DType::F16, nullptr, bad_tiled), Error);
  free_fpx_weight(&dw);
}

// Where the tiled kernel runs it needs a scratch that holds the launch's copy of x: none, or
// a byte short, is refused before any launch.
TEST(GemmFpxEdges, TiledKernelRejectsAShortScratch) {
  if (!tiled_kernel_runs_here()) GTEST_SKIP() << "the tiled kernel needs an H100 (sm_90a)";
  const std::vector<float> w(16 * 64, 0.5f);
  const PackedWeight packed = quantize_weight(w.data(), 16, 64, WeightFormat::parse("fp6"));
  FpxDeviceWeight dw = upload_fpx_weight(packed, DType::F16);
  ASSERT_GT(gemm_fpx_scratch_bytes(dw, 32), 0u);
  GemmFpxConfig tiled;
  tiled.tiled = 1;
  EXPECT_THROW(gemm_fpx(dw, nullptr, nullptr, 32, DType::F16, nullptr, tiled), Error);
  void* aligned = reinterpret_cast<void*>(256);
  const size_t needed = gemm_fpx_scratch_bytes(dw, 32) / 4;  // 32 x rows of the 128 it allows for
  EXPECT_THROW(gemm_fpx(dw, nullptr, nullptr, 32, DType::F16, nullptr, tiled, nullptr, aligned, needed - 1), Error);
  EXPECT_THROW(gemm_fpx(dw, nullptr, nullptr, 32, DType::F16, nullptr, tiled, nullptr, aligned, 0), Error);
  free_fpx_weight(&dw);
}

}  // namespace
}  // namespace gemlite
