// gemv_qn against the CPU reference of its own weights (tests/gpu/qn_reference.h: the
// format's codes, scales and zeros as the kernel rounds them, in float64; the test
// KernelWeightsAreTheFormatsWeights ties them to the library's decoder) on fresh random
// inputs: every bit
// width 1..8 x group {32, 64, 128, per-channel} x {fp16, bf16} x M {1, 3, 8, 9, 13, 16} (above
// 8 the kernel that takes the activations as the mma's A; not on the square), on shapes
// that are multiples of nothing (K = 33, 4100), thin (N = 7, 32, 64), long (K = 57344:
// at groups 32 and 64 a scale slab past 48 KB, the opt-in shared memory; where the GPU
// cannot hold it, upload_qn_weight must refuse it instead), and one large square (4096^2,
// on a subset to keep the run short).
//
// Reference and tolerance (tests/gpu/qn_reference.h): the reference multiplies x by the
// weights exactly as the kernel forms them (w = q s + (-z s) with s and -z s in the
// activation type, one fma rounding), in float64, so per output
//   |y - ref| <= u |ref| + 2 (K / 16 + 32) 2^-23 S,   S = sum_k |x_k w_k|,
// the fp32 accumulation on the tensor cores and the one rounding of the output (u = 2^-11
// fp16, 2^-8 bf16). The worst |error| / tolerance of each format is printed. A wrong shift
// or lane, which touches every weight, errs by ~sqrt(K) |x w| (|x w| the products' rms);
// one group's 10 % wrong scale by ~0.1 sqrt(64) |x w| = 0.8 |x w|, a dropped block by
// ~sqrt(32) |x w|. At K = 4100 the bound's accumulation part is ~0.2 |x w| (S ~ 0.64 K
// |x w|), so both fail it. That worst-case part grows as K^2: 1.2 |x w| at K = 11008, 30
// at K = 57344, too wide to see one group there, so GemvQnEdges.EveryGroupHasItsOwnScale
// puts each row of x on one group instead.
// The raw-code kernels (fp16 at 2 and 4 bits, M = 1, x staged) never round a weight to
// fp16: they differ from this reference by Σ x_k (w_k - fl(w_k)), a sum of independent
// roundings ~ u / sqrt(3) sqrt(K) |x w| (0.02 |x w| at K = 4096, 0.03 at 11008), inside the
// bound's accumulation part (0.18 and 1.2 |x w| there); they stage x only where K % 8 == 0,
// so K = 33 and 4100 take the fma2 kernel.
// Outputs are poisoned with 0xFF bytes (NaN in fp16 and bf16) before every launch, so an
// unwritten output fails.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "tests/gpu/gpu_test_helpers.h"
#include "kernels/group_quant.h"
#include "kernels/packed_weight.h"
#include "kernels/qn/qn_format.h"
#include "kernels/qn/dequant_qn.h"
#include "kernels/qn/gemm_qn.h"
#include "kernels/qn/gemv_qn.h"
#include "kernels/weight_format.h"
#include "runtime/cuda/ops.h"
#include "runtime/dtype.h"
#include "tests/gpu/qn_check.h"
#include "tests/gpu/qn_reference.h"
#include "tests/gpu/reference_products.h"

namespace gemlite {
namespace {

// gemv_qn on that launch.
CheckResult run_and_compare(const PackedWeight& packed, const QnDeviceWeight& dw, DType act, int64_t M,
                            std::mt19937_64& rng, cudaStream_t stream, int x_offset_elements = 0,
                            const GemvQnConfig& config = {}, bool positive_x = false) {
  return launch_and_compare(
      packed, act, M, rng, stream,
      [&](const void* x, void* y) { gemv_qn(dw, x, y, int(M), act, stream, config); }, x_offset_elements,
      positive_x);
}

struct Shape {
  int64_t K, N;
};

size_t device_shared_memory_per_block() {  // with the opt-in
  int device = 0, bytes = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return size_t(bytes);
}

class GemvQnTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(GemvQnTest, MatchesCpuReference) {
  const auto [bits, group] = GetParam();
  const WeightFormat format = qn_format(bits, group);
  std::mt19937_64 rng(test_seed() * 1000003 + uint64_t(bits * 1000 + group));
  StreamGuard stream;
  std::vector<Shape> shapes = {{33, 7}, {4100, 1000}, {11008, 64}, {57344, 32}};
  if (bits == 4 || group == 64) shapes.push_back({4096, 4096});  // the large square on a subset
  double worst[2] = {0, 0};  // fp16, bf16: max |error| / tolerance
  bool opt_in_slab = false, refused = false;  // a slab past the 48 KB a block has without opting in; one refused
  const size_t shared_per_block = device_shared_memory_per_block();
  for (const Shape& shape : shapes) {
    const std::vector<float> w = random_weight(shape.N, shape.K, rng);
    const PackedWeight packed = quantize_weight(w.data(), shape.N, shape.K, format);
    const size_t slab = size_t(group_count(format.group, shape.K)) * 64;
    if (slab + (10u << 10) > shared_per_block) {  // sm_86 / sm_89 at K = 57344, group 32
      EXPECT_THROW(upload_qn_weight(packed, DType::F16), Error) << "K = " << shape.K << ": a slab the GPU cannot hold";
      refused = true;
      continue;
    }
    for (DType act : {DType::F16, DType::BF16}) {
      QnDeviceWeight dw = upload_qn_weight(packed, act);
      ASSERT_EQ(gemv_qn_scale_slab_bytes(dw), slab);
      opt_in_slab |= slab > (48u << 10);
      // The 16-row kernel (M 13, 16) on every shape but the large square, whose CPU
      // reference at those M would double the suite's time.
      const bool square = shape.K == 4096 && shape.N == 4096;
      for (int64_t M : {1, 3, 8, 9, 13, 16}) {
        if (square && M > kGemvMaxM) continue;
        SCOPED_TRACE(format.name() + " " + dtype_name(act) + " K=" + std::to_string(shape.K) +
                     " N=" + std::to_string(shape.N) + " M=" + std::to_string(M) +
                     " seed=" + std::to_string(test_seed()));
        const CheckResult r = run_and_compare(packed, dw, act, M, rng, stream.stream);
        EXPECT_EQ(r.failures, 0) << r.first_failure;
        const int a = act == DType::BF16;
        worst[a] = std::max(worst[a], r.worst_ratio);
      }
      free_qn_weight(&dw);
    }
  }
  // K = 57344 at groups 32 and 64 (114 and 57 KB of scales a block) takes the opt-in shared memory.
  if (group == 32 || group == 64)
    EXPECT_TRUE(opt_in_slab || refused) << "no shape's scales needed the opt-in shared memory";
  std::cout << "[gemv_qn] " << format.name() << ": worst |error| / tolerance fp16 " << worst[0] << ", bf16 "
            << worst[1] << "\n";
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  const auto [bits, group] = info.param;
  return "Bits" + std::to_string(bits) + (group ? "Group" + std::to_string(group) : "PerChannel");
}

INSTANTIATE_TEST_SUITE_P(AllFormats, GemvQnTest,
                         ::testing::Combine(::testing::Range(1, 9), ::testing::Values(32, 64, 128, 0)),
                         param_name);

// The tolerance's accumulation part grows as K^2 (MatchesCpuReference's comment), faster
// than the error of a missing part of a random sum (~sqrt K). With x and W positive nothing
// cancels: S = |y| here, so the bound is u |y| + 8.6e-4 |y| at K = 57344 (0.09 % of y in
// fp16, 0.5 % in bf16), while k >= 49152 (whose scales lie past 48 KB, in the opt-in
// shared memory) holds 1/7 of y.
TEST(GemvQnEdges, EveryPartOfALongKIsSummed) {
  std::mt19937_64 rng(test_seed() + 29);
  StreamGuard stream;
  const int64_t K = 57344, N = 48;
  std::uniform_real_distribution<float> positive(0.5f, 1.0f);
  std::vector<float> w(size_t(N * K));  // [N, K]; |y| <= K = 57344 < fp16's 65504
  for (float& v : w) v = positive(rng);
  const size_t shared_per_block = device_shared_memory_per_block();
  for (const WeightFormat& format : {qn_format(4, 64), qn_format(2, 32), qn_format(8, 0)}) {
    const PackedWeight packed = quantize_weight(w.data(), N, K, format);
    if (size_t(group_count(format.group, K)) * 64 + (10u << 10) > shared_per_block) continue;  // refused (tested above)
    for (DType act : {DType::F16, DType::BF16}) {
      QnDeviceWeight dw = upload_qn_weight(packed, act);
      for (int64_t M : {1, 16}) {
        SCOPED_TRACE(format.name() + " " + dtype_name(act) + " M=" + std::to_string(M) +
                     " seed=" + std::to_string(test_seed()));
        const CheckResult r = run_and_compare(packed, dw, act, M, rng, stream.stream, 0, {}, /*positive_x=*/true);
        EXPECT_EQ(r.failures, 0) << r.first_failure;
      }
      free_qn_weight(&dw);
    }
  }
}

// Each group of a long K is dequantized with its own {scale, -zero * scale}
// (check_every_group: one group a row of x, so S covers 32..128 products and the bound is
// ~u |y| + 8.6e-4 S at K = 57344), while a neighbour's scale (random_weight's per-97-column
// outliers make groups' ranges differ) or a pair read from the wrong place in the opt-in
// shared memory errs by a share of y. In both kernels (M = 8: the weights as the mma's A;
// M = 16: x as A), the bf16 8-bit path, and K = 4100 (a last group of 4).
TEST(GemvQnEdges, EveryGroupHasItsOwnScale) {
  std::mt19937_64 rng(test_seed() + 59);
  StreamGuard stream;
  const int64_t N = 40;
  const size_t shared_per_block = device_shared_memory_per_block();
  struct Case {
    int64_t K;
    int bits, group;
    DType act;
  };
  for (const Case c : {Case{57344, 4, 64, DType::F16}, Case{57344, 4, 64, DType::BF16}, Case{57344, 2, 32, DType::F16},
                       Case{57344, 3, 128, DType::BF16}, Case{57344, 8, 128, DType::BF16},
                       Case{4100, 4, 64, DType::F16}}) {  // the last: a partial last group of 4
    const int64_t K = c.K;
    const std::vector<float> w = random_weight(N, K, rng);
    const PackedWeight packed = quantize_weight(w.data(), N, K, qn_format(c.bits, c.group));
    if (size_t(group_count(c.group, K)) * 64 + (10u << 10) > shared_per_block) continue;  // refused (MatchesCpuReference)
    QnDeviceWeight dw = upload_qn_weight(packed, c.act);
    for (int64_t M : {8, 16}) {
      SCOPED_TRACE(packed.format.name() + " " + dtype_name(c.act) + " M=" + std::to_string(M) +
                   " seed=" + std::to_string(test_seed()));
      const CheckResult r = check_every_group(packed, c.act, M, rng, stream.stream, [&](const void* x, void* y) {
        gemv_qn(dw, x, y, int(M), c.act, stream.stream);
      });
      EXPECT_EQ(r.failures, 0) << r.first_failure;
      std::cout << "[gemv_qn] one group a row, " << packed.format.name() << " " << dtype_name(c.act) << " M=" << M
                << ": worst |error| / tolerance " << r.worst_ratio << "\n";
    }
    free_qn_weight(&dw);
  }
}

// Misaligned x (odd element offset) and K % 8 != 0 take the scalar activation path; a bias
// is added after the reduction.
TEST(GemvQnEdges, MisalignedActivationsAndBias) {
  std::mt19937_64 rng(test_seed() + 17);
  StreamGuard stream;
  for (const Shape shape : {Shape{4096, 300}, Shape{1030, 45}}) {
    const std::vector<float> w = random_weight(shape.N, shape.K, rng);
    PackedWeight packed = quantize_weight(w.data(), shape.N, shape.K, qn_format(4, 128));
    add_random_bias(&packed, rng);
    for (DType act : {DType::F16, DType::BF16}) {
      QnDeviceWeight dw = upload_qn_weight(packed, act);
      for (int offset : {0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(act)) + " K=" + std::to_string(shape.K) + " x offset " +
                     std::to_string(offset) + " seed=" + std::to_string(test_seed()));
        const CheckResult r = run_and_compare(packed, dw, act, 5, rng, stream.stream, offset);
        EXPECT_EQ(r.failures, 0) << r.first_failure;
      }
      free_qn_weight(&dw);
    }
  }
}

// Every count of warps splitting K, whether or not it divides the tiles (the automatic
// choice takes 3, 4 or 8), in both kernels (M = 1: weights as A; M = 16: x as A, at most 8
// warps), with a partial last tile (K = 4100) and a last row block of 8 rows (N = 1000).
TEST(GemvQnEdges, EveryWarpCount) {
  std::mt19937_64 rng(test_seed() + 23);
  StreamGuard stream;
  for (const int bits : {4, 3}) {
    const int64_t N = 1000, K = 4100;
    const std::vector<float> w = random_weight(N, K, rng);
    const PackedWeight packed = quantize_weight(w.data(), N, K, qn_format(bits, 64));
    QnDeviceWeight dw = upload_qn_weight(packed, DType::F16);
    for (int64_t M : {1, 16})
      for (int warps : {1, 2, 3, 5, 6, 7, 8, 16}) {
        SCOPED_TRACE("q" + std::to_string(bits) + "g64 M=" + std::to_string(M) + " warps=" + std::to_string(warps) +
                     " seed=" + std::to_string(test_seed()));
        GemvQnConfig config;
        config.warps_per_block = warps;
        const CheckResult r = run_and_compare(packed, dw, DType::F16, M, rng, stream.stream, 0, config);
        EXPECT_EQ(r.failures, 0) << r.first_failure;
      }
    free_qn_weight(&dw);
  }
}

// The automatic warp count on a grid long enough for qn_warps_per_block's two-wave clause
// (1063 blocks of 16 rows >= 2 x 132 SMs x 4 blocks: 4 warps at M <= 8; the 16-row kernel
// keeps the fill rule), with a last row block of 8 rows: the launches Llama-3's gate/up and
// classifier take.
TEST(GemvQnEdges, AutomaticWarpsOnALongGrid) {
  std::mt19937_64 rng(test_seed() + 29);
  StreamGuard stream;
  const int64_t N = 17000, K = 4096;
  const std::vector<float> w = random_weight(N, K, rng);
  const PackedWeight packed = quantize_weight(w.data(), N, K, qn_format(4, 64));
  QnDeviceWeight dw = upload_qn_weight(packed, DType::F16);
  for (int64_t M : {1, 3, 16}) {
    SCOPED_TRACE("q4g64 K=4096 N=17000 M=" + std::to_string(M) + " seed=" + std::to_string(test_seed()));
    const CheckResult r = run_and_compare(packed, dw, DType::F16, M, rng, stream.stream);
    EXPECT_EQ(r.failures, 0) << r.first_failure;
  }
  free_qn_weight(&dw);
}

// At M = 1 x is staged in shared memory where it fits (GemvQnConfig::stage_x): both ways of
// reading it, with a partial last tile whose first chunks lie below K (read from the staged
// copy, zeros past K; in the fp16 q4g64 raw-code kernel the full tiles run raw codes, that
// tile fma2) -- K = 4104 for q3g64 and q6g64 (tiles of 320 and 160 k), 4168 for the tiles
// of 256 and 128 k (q4g64, s7, q8), 14408, 28680 (a last tile of 8 k) and 40008 (q4g64) past
// the 48 KB a block has without the opt-in (automatically where an SM holds two such
// blocks: 84 KB a block at 28680 of the 228 KB of the H100's and H200's SMs, taken in 8-warp
// blocks; 40008 only when asked, stage_x = 1: 39 KB of slab and 78 KB of x, one block an SM,
// where the opt-in has the room) -- a last row block of 8 rows, several warp counts, fp16
// and bf16.
TEST(GemvQnEdges, StagedAndGlobalActivationsAtM1) {
  std::mt19937_64 rng(test_seed() + 29);
  StreamGuard stream;
  const int64_t N = 1000;
  int device = 0, sm_shared = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_shared, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  struct Case {
    const char* name;
    int64_t K;
  };
  const std::vector<Case> cases = {{"q3g64", 4104}, {"q6g64", 4104},  {"q4g64", 4168},  {"s7", 4168},
                                   {"q8", 4168},    {"q4g64", 14408}, {"q4g64", 28680}, {"q4g64", 40008}};
  for (const auto& [name, K] : cases) {
    const std::vector<float> w = random_weight(N, K, rng);
    const PackedWeight packed = quantize_weight(w.data(), N, K, WeightFormat::parse(name));
    for (DType act : {DType::F16, DType::BF16}) {
      QnDeviceWeight dw = upload_qn_weight(packed, act);
      // launch_and_compare's x is 16-byte aligned at offset 0 (as in the model).
      DeviceBuffer aligned(size_t(K) * 2);
      // The rule: slab, x (to the last tile's end) and the kernels' static memory (bounded by
      // 10 KB) within the 48 KB a block has without the opt-in, or two such blocks (and 1 KB
      // each the driver keeps) an SM.
      const size_t staged_x = gemv_qn_staged_x_bytes(dw);
      EXPECT_GE(staged_x, size_t(K) * 2);
      const int64_t tile_k = 32 * (dw.sparse ? 8 : 32 / dw.bits);  // 32 E k: E codes a word, 8 blocks an s7 word
      EXPECT_LT(staged_x, size_t(K + tile_k) * 2) << "a tile or more past K";
      const size_t block = gemv_qn_scale_slab_bytes(dw) + staged_x + (10 << 10);
      const bool staged_automatically = block <= (48 << 10) || 2 * (block + 1024) <= size_t(sm_shared);
      EXPECT_EQ(gemv_qn_stages_x(dw, 1, aligned.ptr), staged_automatically) << name << " K = " << K;
      // Forced, wherever slab, x and the kernel's static memory (under 10 KB) fit the opt-in.
      const bool fits = gemv_qn_scale_slab_bytes(dw) + staged_x + (10 << 10) <= size_t(optin);
      for (int stage_x : {0, 1}) {
        GemvQnConfig config;
        config.stage_x = stage_x;
        EXPECT_EQ(gemv_qn_stages_x(dw, 1, aligned.ptr, config), stage_x == 1 && fits) << name << " K = " << K;
        EXPECT_FALSE(gemv_qn_stages_x(dw, 2, aligned.ptr, config)) << name << ": staged at M = 2";
        for (int warps : {0, 1, 3, 16}) {
          SCOPED_TRACE(std::string(name) + " K=" + std::to_string(K) + " " + dtype_name(act) +
                       " stage_x=" + std::to_string(stage_x) + " warps=" + std::to_string(warps) +
                       " seed=" + std::to_string(test_seed()));
          config.warps_per_block = warps;
          const CheckResult r = run_and_compare(packed, dw, act, 1, rng, stream.stream, 0, config);
          EXPECT_EQ(r.failures, 0) << r.first_failure;
        }
      }
      free_qn_weight(&dw);
    }
  }
}

// The raw-code kernels (fp16 at 2 and 4 bits, gemv_qn_kernel.cuh) apply a group's scale once
// per two 32-k blocks, so their groups of 32 run unstaged even where staging is asked for;
// in bf16 the same weights stage. Both still match the reference.
TEST(GemvQnEdges, RawCodeWidthsStageGroupsOf64AndMore) {
  std::mt19937_64 rng(test_seed() + 31);
  StreamGuard stream;
  const int64_t N = 200, K = 4096;
  const std::vector<float> w = random_weight(N, K, rng);
  DeviceBuffer aligned(size_t(K) * 2);
  GemvQnConfig forced;
  forced.stage_x = 1;
  for (const char* name : {"q4g32", "q2g32", "q4g64", "q2g128"}) {
    const PackedWeight packed = quantize_weight(w.data(), N, K, WeightFormat::parse(name));
    const bool group32 = packed.format.group == 32;
    for (DType act : {DType::F16, DType::BF16}) {
      SCOPED_TRACE(std::string(name) + " " + dtype_name(act) + " seed=" + std::to_string(test_seed()));
      QnDeviceWeight dw = upload_qn_weight(packed, act);
      const bool staged = !(group32 && act == DType::F16);
      EXPECT_EQ(gemv_qn_stages_x(dw, 1, aligned.ptr), staged);
      EXPECT_EQ(gemv_qn_stages_x(dw, 1, aligned.ptr, forced), staged);
      const CheckResult r = run_and_compare(packed, dw, act, 1, rng, stream.stream, 0, forced);
      EXPECT_EQ(r.failures, 0) << r.first_failure;
      free_qn_weight(&dw);
    }
  }
}

// dequant_qn's [N, K] copy of a weight uploaded for `act`, its output poisoned (NaN) first.
std::vector<uint16_t> dequantize_on_device(const PackedWeight& packed, DType act, cudaStream_t stream) {
  QnDeviceWeight dw = upload_qn_weight(packed, act);
  const size_t count = size_t(dw.N * dw.K);
  DeviceBuffer out(count * 2);
  CUDA_CHECK(cudaMemsetAsync(out.ptr, 0xFF, count * 2, stream));
  dequant_qn(dw, out.ptr, stream);
  std::vector<uint16_t> got(count);
  CUDA_CHECK(cudaMemcpyAsync(got.data(), out.ptr, count * 2, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  free_qn_weight(&dw);
  return got;
}

// The reference's weights (qn_kernel_row_decoder) are the format's (the library's row
// decoder, (q - z) s in fp32) but for the kernels' roundings of s, of -z s and of the fma,
// each at most u (2^-11 fp16, 2^-8 bf16) of |q s|, |z s| and |w|: within 2u times their
// sum, and a pruned s7 element 0 in both. Host code only, so the emulation cannot drift
// from the checkpoint format unseen. Every bit width and group, s7, K = 4100 (a partial
// last group).
TEST(DequantQn, KernelWeightsAreTheFormatsWeights) {
  std::mt19937_64 rng(test_seed() + 61);
  const int64_t N = 21, K = 4100;
  const std::vector<float> w = random_weight(N, K, rng);
  std::vector<WeightFormat> formats;
  for (int bits = 1; bits <= 8; ++bits)
    for (int group : {32, 64, 128, 0}) formats.push_back(qn_format(bits, group));
  formats.push_back(WeightFormat::parse("s7g64"));
  for (const WeightFormat& format : formats) {
    const PackedWeight packed = quantize_weight(w.data(), N, K, format);
    const int64_t G = group_size(format.group, K), n_groups = group_count(format.group, K);
    const uint16_t* scales = packed.part("scales").as<uint16_t>();  // [N, n_groups]
    const uint16_t* zeros = packed.part("zeros").as<uint16_t>();    // [N, n_groups]
    const RowDecoder library = make_row_decoder(packed);
    const int max_code = format.kind == FormatKind::S7 ? 127 : (1 << format.bits) - 1;
    for (DType act : {DType::F16, DType::BF16}) {
      SCOPED_TRACE(format.name() + " " + dtype_name(act));
      const RowDecoder kernel = qn_kernel_row_decoder(packed, act);
      const double u = act == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      std::vector<float> want(static_cast<size_t>(K)), got(static_cast<size_t>(K));
      int64_t failures = 0;
      for (int64_t n = 0; n < N; ++n) {
        library(n, want.data());
        kernel(n, got.data());
        for (int64_t k = 0; k < K; ++k) {
          const double s = half_to_float(scales[n * n_groups + k / G]), z = half_to_float(zeros[n * n_groups + k / G]);
          const double tol = 2 * u * (std::abs(want[size_t(k)]) + std::abs(max_code * s) + std::abs(z * s));
          const bool pruned_both = want[size_t(k)] == 0.0f && got[size_t(k)] == 0.0f;
          if (!(pruned_both || std::abs(double(got[size_t(k)]) - want[size_t(k)]) <= tol) && failures++ == 0)
            ADD_FAILURE() << "w[" << n << ", " << k << "]: format " << want[size_t(k)] << ", kernel's "
                          << got[size_t(k)] << " (tol " << tol << ")";
        }
      }
      EXPECT_EQ(failures, 0);
    }
  }
}

// dequant_qn's weights, bit for bit, against what its fp32 fma and one rounding make of
// the stored scale and -zero * scale (qn_kernel_row_decoder, QnFma::Fp32ThenActivation),
// and within one unit in the last place of the GEMV's weights (one rounding from the exact
// value: the two differ only where the fp32 result lands on a tie), for every bit width and
// group, and s7, on shapes that fill no tile or 16-row block (N = 37, K = 4100: one value
// stored at a time; N = 21, K = 4104: 16-byte stores up to the partial last tile) or
// exactly one (N = 16, K = 256). Output is poisoned (NaN) first, so an unwritten weight
// fails; s7's pruned elements must be +0 (at least half of all weights).
TEST(DequantQn, MatchesTheKernelsWeightsBitwise) {
  std::mt19937_64 rng(test_seed() + 41);
  StreamGuard stream;
  std::vector<WeightFormat> formats;
  for (int bits = 1; bits <= 8; ++bits)
    for (int group : {32, 64, 128, 0}) formats.push_back(qn_format(bits, group));
  formats.push_back(WeightFormat::parse("s7"));
  formats.push_back(WeightFormat::parse("s7g64"));
  for (const Shape shape : {Shape{4100, 37}, Shape{4104, 21}, Shape{256, 16}}) {
    const int64_t N = shape.N, K = shape.K;
    const std::vector<float> w = random_weight(N, K, rng);
    for (const WeightFormat& format : formats) {
      const PackedWeight packed = quantize_weight(w.data(), N, K, format);
      for (DType act : {DType::F16, DType::BF16}) {
        SCOPED_TRACE(format.name() + " " + dtype_name(act) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
                     " seed=" + std::to_string(test_seed()));
        const std::vector<uint16_t> got = dequantize_on_device(packed, act, stream.stream);  // [N, K]
        const RowDecoder dequant = qn_kernel_row_decoder(packed, act, QnFma::Fp32ThenActivation),
                         gemv = qn_kernel_row_decoder(packed, act);
        std::vector<float> want(static_cast<size_t>(K)), gemv_row(static_cast<size_t>(K));
        int64_t failures = 0, zeros_seen = 0;
        for (int64_t n = 0; n < N; ++n) {
          dequant(n, want.data());
          gemv(n, gemv_row.data());
          for (int64_t k = 0; k < K; ++k) {
            const uint16_t bits = got[size_t(n * K + k)];
            const uint16_t want_bits = act == DType::BF16 ? float_to_bf16(want[size_t(k)]) : float_to_half(want[size_t(k)]);
            const uint16_t gemv_bits =
                act == DType::BF16 ? float_to_bf16(gemv_row[size_t(k)]) : float_to_half(gemv_row[size_t(k)]);
            zeros_seen += bits == 0;
            // Adjacent values of one sign are adjacent bit patterns.
            const bool one_ulp = std::abs(int(bits) - int(gemv_bits)) <= 1;
            if (!(bits == want_bits && one_ulp) && failures++ == 0)
              ADD_FAILURE() << "w[" << n << ", " << k << "]: bits " << bits << ", expected " << want_bits
                            << " (the GEMV's " << gemv_bits << ")";
          }
        }
        EXPECT_EQ(failures, 0);
        if (format.kind == FormatKind::S7) EXPECT_GE(zeros_seen, N * (K / 64) * 32) << "pruned elements not +0";
      }
    }
  }
}

// A weight whose scales no block can hold (K = 131072 at group 32: 256 KB, past every GPU's
// 227 KB) is refused at upload with one line naming the weight, not at launch.
TEST(GemvQnEdges, RefusesScalesPastSharedMemory) {
  std::mt19937_64 rng(test_seed() + 31);
  const int64_t K = 131072, N = 16;
  const std::vector<float> w = random_weight(N, K, rng);
  const PackedWeight packed = quantize_weight(w.data(), N, K, qn_format(4, 32));
  try {
    upload_qn_weight(packed, DType::F16);
    ADD_FAILURE() << "uploaded a weight with 256 KB of scales a block";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("upload_qn_weight (q4g32)"), std::string::npos) << what;
    EXPECT_NE(what.find("shared memory"), std::string::npos) << what;
  }
}

// The launch must be capturable: no default-stream work, no synchronization inside; also
// for a weight whose scales take the opt-in shared memory (K = 40000 at group 32: an 80 KB
// slab), which upload_qn_weight, not the launch, allows the kernels.
TEST(GemvQnEdges, CapturesIntoCudaGraph) {
  std::mt19937_64 rng(test_seed() + 29);
  struct Case {
    int64_t K, N;
    int bits, group;
  };
  for (const Case c : {Case{2048, 333, 3, 64}, Case{40000, 40, 4, 32}}) {
    SCOPED_TRACE("K=" + std::to_string(c.K) + " N=" + std::to_string(c.N));
    const int64_t K = c.K, N = c.N, M = 2;
    const std::vector<float> w = random_weight(N, K, rng);
    const PackedWeight packed = quantize_weight(w.data(), N, K, qn_format(c.bits, c.group));
    QnDeviceWeight dw = upload_qn_weight(packed, DType::F16);
    EXPECT_EQ(gemv_qn_scale_slab_bytes(dw) > (48u << 10), c.K == 40000);
    std::vector<uint16_t> x_bits;
    std::vector<float> x;
    random_activations(M, K, DType::F16, rng, &x_bits, &x);
    StreamGuard stream;
    DeviceBuffer dx(size_t(M * K) * 2), dy(size_t(M * N) * 2);
    CUDA_CHECK(cudaMemcpy(dx.ptr, x_bits.data(), x_bits.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dy.ptr, 0xFF, size_t(M * N) * 2));
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamBeginCapture(stream.stream, cudaStreamCaptureModeGlobal));
    gemv_qn(dw, dx.ptr, dy.ptr, int(M), DType::F16, stream.stream);
    CUDA_CHECK(cudaStreamEndCapture(stream.stream, &graph));
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, stream.stream));
    CUDA_CHECK(cudaStreamSynchronize(stream.stream));
    std::vector<uint16_t> y(size_t(M * N));
    CUDA_CHECK(cudaMemcpy(y.data(), dy.ptr, y.size() * 2, cudaMemcpyDeviceToHost));
    const CheckResult r = compare_with_kernel_reference(packed, DType::F16, x, M, y);
    EXPECT_EQ(r.failures, 0) << r.first_failure;
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    free_qn_weight(&dw);
  }
}

// A SwiGLU pair [gate; up] uploaded with paired_half (kernel block b = the gate and up rows
// of [8b, 8b + 8)) computes every row exactly as the plain upload does (the same k order and
// warps, only in another block), so: gemv_qn on it equals gemv_qn on the plain upload bit
// for bit (the plain output is checked against the CPU by MatchesCpuReference), its
// dequant_qn copy equals the plain one, and gemv_qn_swiglu equals the plain output followed
// by the backend's silu_mul kernel, bit for bit. Outputs are poisoned (NaN) first, and the
// plain results must be finite, so an output left unwritten fails. Halves of 1000 rows
// (not a multiple of 16), 8 (one block) and 64; a bias on one case.
TEST(GemvQnSwiglu, PairedLayoutMatchesPlainBitwise) {
  std::mt19937_64 rng(test_seed() + 47);
  StreamGuard stream;
  struct Case {
    int64_t K, half;
    int bits, group;
    DType act;
    bool bias;
  };
  for (const Case c : {Case{4100, 1000, 4, 64, DType::F16, false}, Case{256, 8, 3, 128, DType::BF16, true},
                       Case{11008, 64, 8, 0, DType::F16, false}}) {
    const int64_t N = 2 * c.half, K = c.K;
    // Scaled so that gate * up stays inside fp16's range (|x . w| reaches ~300 at K = 4100).
    std::vector<float> w = random_weight(N, K, rng);
    for (float& v : w) v *= 1.0f / 16;
    PackedWeight packed = quantize_weight(w.data(), N, K, qn_format(c.bits, c.group));
    if (c.bias) add_random_bias(&packed, rng);
    QnDeviceWeight plain = upload_qn_weight(packed, c.act), paired = upload_qn_weight(packed, c.act, c.half);
    const auto to_float = [&](uint16_t v) { return c.act == DType::BF16 ? bf16_to_float(v) : half_to_float(v); };
    for (int M : {1, 3, 8, 11, 16}) {
      SCOPED_TRACE(packed.format.name() + " " + dtype_name(c.act) + " K=" + std::to_string(K) + " half=" +
                   std::to_string(c.half) + " M=" + std::to_string(M) + " seed=" + std::to_string(test_seed()));
      std::vector<uint16_t> x_bits;
      std::vector<float> x;
      random_activations(M, K, c.act, rng, &x_bits, &x);
      DeviceBuffer dx(size_t(M * K) * 2), y_plain(size_t(M * N) * 2), y_paired(size_t(M * N) * 2),
          gated(size_t(M * c.half) * 2), fused(size_t(M * c.half) * 2);
      CUDA_CHECK(cudaMemcpyAsync(dx.ptr, x_bits.data(), x_bits.size() * 2, cudaMemcpyHostToDevice, stream.stream));
      for (DeviceBuffer* b : {&y_plain, &y_paired})
        CUDA_CHECK(cudaMemsetAsync(b->ptr, 0xFF, size_t(M * N) * 2, stream.stream));
      for (DeviceBuffer* b : {&gated, &fused})
        CUDA_CHECK(cudaMemsetAsync(b->ptr, 0xFF, size_t(M * c.half) * 2, stream.stream));
      gemv_qn(plain, dx.ptr, y_plain.ptr, M, c.act, stream.stream);
      gemv_qn(paired, dx.ptr, y_paired.ptr, M, c.act, stream.stream);
      launch_silu_mul(y_plain.ptr, M, c.half, gated.ptr, c.act, stream.stream);
      gemv_qn_swiglu(paired, dx.ptr, fused.ptr, M, c.act, stream.stream);
      std::vector<uint16_t> a(size_t(M * N)), b(size_t(M * N)), g(size_t(M * c.half)), f(size_t(M * c.half));
      CUDA_CHECK(cudaMemcpyAsync(a.data(), y_plain.ptr, a.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
      CUDA_CHECK(cudaMemcpyAsync(b.data(), y_paired.ptr, b.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
      CUDA_CHECK(cudaMemcpyAsync(g.data(), gated.ptr, g.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
      CUDA_CHECK(cudaMemcpyAsync(f.data(), fused.ptr, f.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
      CUDA_CHECK(cudaStreamSynchronize(stream.stream));
      ASSERT_TRUE(std::all_of(a.begin(), a.end(), [&](uint16_t v) { return std::isfinite(to_float(v)); }));
      ASSERT_TRUE(std::all_of(g.begin(), g.end(), [&](uint16_t v) { return std::isfinite(to_float(v)); }));
      EXPECT_EQ(a, b) << "gemv_qn on the paired layout differs from the plain one";
      EXPECT_EQ(g, f) << "gemv_qn_swiglu differs from gemv_qn + silu_mul";
    }
    DeviceBuffer d_plain(size_t(N * K) * 2), d_paired(size_t(N * K) * 2);
    for (DeviceBuffer* b : {&d_plain, &d_paired})  // NaN: a row either copy skips fails
      CUDA_CHECK(cudaMemsetAsync(b->ptr, 0xFF, size_t(N * K) * 2, stream.stream));
    dequant_qn(plain, d_plain.ptr, stream.stream);
    dequant_qn(paired, d_paired.ptr, stream.stream);
    std::vector<uint16_t> a(size_t(N * K)), b(size_t(N * K));
    CUDA_CHECK(cudaMemcpyAsync(a.data(), d_plain.ptr, a.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
    CUDA_CHECK(cudaMemcpyAsync(b.data(), d_paired.ptr, b.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
    CUDA_CHECK(cudaStreamSynchronize(stream.stream));
    ASSERT_TRUE(std::all_of(a.begin(), a.end(), [&](uint16_t v) { return std::isfinite(to_float(v)); }));
    EXPECT_EQ(a, b) << "dequant_qn of the paired layout differs from the plain one";
    EXPECT_THROW(gemv_qn_swiglu(plain, nullptr, nullptr, 1, c.act, stream.stream), Error);
    free_qn_weight(&plain);
    free_qn_weight(&paired);
  }
  std::vector<float> w = random_weight(24, 64, rng);
  const PackedWeight odd = quantize_weight(w.data(), 24, 64, qn_format(4, 64));
  EXPECT_THROW(upload_qn_weight(odd, DType::F16, 12), Error);  // halves of 12 rows: not a multiple of 8
  EXPECT_THROW(upload_qn_weight(odd, DType::F16, 8), Error);   // 2 x 8 != 24 rows
}

// The RMSNorm fused into the projections around it (gemv_qn_residual, then gemv_qn /
// gemv_qn_swiglu with a QnPendingNorm) against the CPU: the residual within the GEMV's
// tolerance (above) plus one rounding of the sum; scaled and the sum of squares exactly
// what the kernel's own residual gives; the next projection within the GEMV tolerance of
// rmsnorm(residual) ∘ g · Wᵀ; its SwiGLU pass bit for bit the plain pass + silu_mul.
TEST(GemvQnFusedNorm, ResidualThenPendingNormMatchTheCpu) {
  std::mt19937_64 rng(test_seed() + 53);
  StreamGuard stream;
  struct Case {
    int64_t K_in, D, N_next;  // producer [D, K_in], next projection [N_next, D]
    DType act;
  };
  // D = 8200: 513 parts, one past what the staged-x kernel loads right after its PDL wait
  // (it falls back to reading them after the loop); D = 4096: 256 parts, loaded early.
  for (const Case c : {Case{4096, 4096, 1000, DType::F16}, Case{11008, 4096, 256, DType::BF16},
                       Case{200, 1000, 24, DType::F16}, Case{64, 40, 16, DType::BF16},
                       Case{64, 8200, 24, DType::F16}}) {
    const int64_t D = c.D, K = c.K_in, N2 = c.N_next;
    const float eps = 1e-5f;
    const auto to_float = [&](uint16_t v) { return c.act == DType::BF16 ? bf16_to_float(v) : half_to_float(v); };
    const auto round_act = [&](float v) { return c.act == DType::BF16 ? float_to_bf16(v) : float_to_half(v); };
    std::vector<float> w1 = random_weight(D, K, rng), w2 = random_weight(N2, D, rng), w3 = random_weight(2 * N2, D, rng);
    for (float& v : w1) v *= 1.0f / 32;  // keeps residual sums inside fp16's range at K = 11008
    for (float& v : w3) v *= 1.0f / 16;  // and gate * up (|x . w| reaches ~300 at D = 4096)
    const PackedWeight p1 = quantize_weight(w1.data(), D, K, qn_format(4, 64));
    PackedWeight p2 = quantize_weight(w2.data(), N2, D, qn_format(6, 32));
    const PackedWeight p3 = quantize_weight(w3.data(), 2 * N2, D, qn_format(3, 128));
    const std::vector<float> bias = add_random_bias(&p2, rng);
    QnDeviceWeight d1 = upload_qn_weight(p1, c.act), d2 = upload_qn_weight(p2, c.act),
                   d3 = upload_qn_weight(p3, c.act), d3_paired = upload_qn_weight(p3, c.act, N2);
    std::vector<float> g(static_cast<size_t>(D));
    std::uniform_real_distribution<float> around_one(0.5f, 1.5f);
    for (float& v : g) v = around_one(rng);
    DeviceBuffer dg(size_t(D) * 4);
    CUDA_CHECK(cudaMemcpyAsync(dg.ptr, g.data(), g.size() * 4, cudaMemcpyHostToDevice, stream.stream));
    const int64_t parts = gemv_qn_blocks(d1);
    EXPECT_EQ(parts, (D + 15) / 16);
    // The automatic warps a block, and 3 (which the automatic choice takes on some shapes):
    // every epilogue after the warps' reduction.
    for (int warps : {0, 3}) {
      for (int M : {1, 3, 8, 11, 16}) {
        SCOPED_TRACE(std::string(dtype_name(c.act)) + " K=" + std::to_string(K) + " D=" + std::to_string(D) +
                     " M=" + std::to_string(M) + " warps=" + std::to_string(warps) +
                     " seed=" + std::to_string(test_seed()));
        GemvQnConfig config;
        config.warps_per_block = warps;
        std::vector<uint16_t> x_bits, r_bits;
        std::vector<float> x, r;
        random_activations(M, K, c.act, rng, &x_bits, &x);
        random_activations(M, D, c.act, rng, &r_bits, &r);
        DeviceBuffer dx(x_bits.size() * 2), dr(r_bits.size() * 2), dscaled(size_t(M * D) * 2),
            dss(size_t(M * parts) * 4), dy2(size_t(M * N2) * 2), dy3(size_t(M * 2 * N2) * 2),
            dgated(size_t(M * N2) * 2), dfused(size_t(M * N2) * 2);
        CUDA_CHECK(cudaMemcpyAsync(dx.ptr, x_bits.data(), x_bits.size() * 2, cudaMemcpyHostToDevice, stream.stream));
        CUDA_CHECK(cudaMemcpyAsync(dr.ptr, r_bits.data(), r_bits.size() * 2, cudaMemcpyHostToDevice, stream.stream));
        for (DeviceBuffer* b : {&dscaled, &dss, &dy2, &dy3, &dgated, &dfused})  // NaN everywhere
          CUDA_CHECK(cudaMemsetAsync(b->ptr, 0xFF, b == &dss ? size_t(M * parts) * 4 : b == &dscaled ? size_t(M * D) * 2
                                                   : b == &dy3 ? size_t(M * 2 * N2) * 2 : size_t(M * N2) * 2,
                                     stream.stream));
        gemv_qn_residual(d1, dx.ptr, dr.ptr, static_cast<const float*>(dg.ptr), dscaled.ptr,
                         static_cast<float*>(dss.ptr), M, c.act, stream.stream, config);
        const QnPendingNorm norm{static_cast<const float*>(dss.ptr), int(parts), eps};
        gemv_qn(d2, dscaled.ptr, dy2.ptr, M, c.act, stream.stream, config, &norm);
        gemv_qn(d3, dscaled.ptr, dy3.ptr, M, c.act, stream.stream, config, &norm);
        launch_silu_mul(dy3.ptr, M, N2, dgated.ptr, c.act, stream.stream);
        gemv_qn_swiglu(d3_paired, dscaled.ptr, dfused.ptr, M, c.act, stream.stream, config, &norm);
        std::vector<uint16_t> r_out(size_t(M * D)), scaled(size_t(M * D)), y2(size_t(M * N2)), gated(size_t(M * N2)),
            fused(size_t(M * N2));
        std::vector<float> ss(size_t(M * parts));
        CUDA_CHECK(cudaMemcpyAsync(r_out.data(), dr.ptr, r_out.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
        CUDA_CHECK(
            cudaMemcpyAsync(scaled.data(), dscaled.ptr, scaled.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
        CUDA_CHECK(cudaMemcpyAsync(ss.data(), dss.ptr, ss.size() * 4, cudaMemcpyDeviceToHost, stream.stream));
        CUDA_CHECK(cudaMemcpyAsync(y2.data(), dy2.ptr, y2.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
        CUDA_CHECK(cudaMemcpyAsync(gated.data(), dgated.ptr, gated.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
        CUDA_CHECK(cudaMemcpyAsync(fused.data(), dfused.ptr, fused.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
        CUDA_CHECK(cudaStreamSynchronize(stream.stream));

        // The residual: r + x · W1ᵀ (fp32), rounded once: the GEMV's tolerance.
        std::vector<double> y1, s1;  // [M, D]: x · W1ᵀ with W1 as the kernel forms it, and Σ |x w|
        reference_products(qn_kernel_row_decoder(p1, c.act), D, K, std::vector<double>(x.begin(), x.end()), M, &y1, &s1);
        int64_t bad = 0;
        for (int64_t i = 0; i < M * D; ++i) {
          const double want = double(r[size_t(i)]) + y1[size_t(i)], got = to_float(r_out[size_t(i)]);
          if (!(std::abs(got - want) <= qn_tolerance(c.act, K, want, s1[size_t(i)])) && bad++ == 0)
            ADD_FAILURE() << "residual[" << i << "] = " << got << ", reference " << want;
        }
        EXPECT_EQ(bad, 0);
        // scaled = residual ∘ g exactly as rounded; the parts add up to Σ residual² per row.
        std::vector<float> scaled_values(size_t(M * D));
        for (int64_t m = 0; m < M; ++m) {
          double sum_squares = 0;
          for (int64_t n = 0; n < D; ++n) {
            const size_t i = size_t(m * D + n);
            const float v = to_float(r_out[i]);
            sum_squares += double(v) * v;
            scaled_values[i] = to_float(scaled[i]);
            ASSERT_EQ(scaled[i], round_act(v * g[size_t(n)])) << "scaled[" << m << ", " << n << "]";
          }
          double parts_sum = 0;
          for (int64_t p = 0; p < parts; ++p) parts_sum += ss[size_t(m * parts + p)];
          EXPECT_NEAR(parts_sum, sum_squares, 1e-5 * sum_squares) << "row " << m;
        }
        // The next projection: inv_rms · (scaled · W2ᵀ) + bias, the GEMV's tolerance with S
        // scaled by inv_rms, plus 1e-5 of the product for the kernel's own inv_rms (from
        // its fp32 sums of squares, checked within 1e-5 above).
        std::vector<double> y2_ref, s2;  // [M, N2]
        reference_products(qn_kernel_row_decoder(p2, c.act), N2, D,
                           std::vector<double>(scaled_values.begin(), scaled_values.end()), M, &y2_ref, &s2);
        for (int64_t m = 0; m < M; ++m) {
          double sum_squares = 0;
          for (int64_t n = 0; n < D; ++n) {
            const double v = to_float(r_out[size_t(m * D + n)]);
            sum_squares += v * v;
          }
          const double inv_rms = 1.0 / std::sqrt(sum_squares / double(D) + eps);
          for (int64_t n = 0; n < N2; ++n) {
            const size_t i = size_t(m * N2 + n);
            const double product = inv_rms * y2_ref[i], want = product + bias[size_t(n)];
            const double got = to_float(y2[i]);
            EXPECT_LE(std::abs(got - want), qn_tolerance(c.act, D, want, inv_rms * s2[i]) + 1e-5 * std::abs(product))
                << "y[" << m << ", " << n << "] = " << got << ", reference " << want;
          }
        }
        EXPECT_EQ(gated, fused) << "gemv_qn_swiglu with a pending norm differs from gemv_qn + silu_mul";
        ASSERT_TRUE(std::all_of(gated.begin(), gated.end(), [&](uint16_t v) { return std::isfinite(to_float(v)); }));
      }
    }
    for (QnDeviceWeight* w : {&d1, &d2, &d3, &d3_paired}) free_qn_weight(w);
  }
}

TEST(GemvQnEdges, RejectsWhatItCannotRun) {
  std::mt19937_64 rng(test_seed() + 43);
  const std::vector<float> w = random_weight(16, 192, rng);
  const PackedWeight g96 = quantize_weight(w.data(), 16, 192, qn_format(4, 96));
  EXPECT_THROW(upload_qn_weight(g96, DType::F16), Error);
  const PackedWeight q4 = quantize_weight(w.data(), 16, 192, qn_format(4, 64));
  EXPECT_THROW(upload_qn_weight(q4, DType::F32), Error);
  QnDeviceWeight dw = upload_qn_weight(q4, DType::F16);
  DeviceBuffer dx((kGemvQnMaxRows + 1) * 192 * 2), dy((kGemvQnMaxRows + 1) * 16 * 2);
  EXPECT_THROW(gemv_qn(dw, dx.ptr, dy.ptr, 0, DType::F16, nullptr), Error);
  EXPECT_THROW(gemv_qn(dw, dx.ptr, dy.ptr, kGemvQnMaxRows + 1, DType::F16, nullptr), Error);
  EXPECT_THROW(gemv_qn(dw, dx.ptr, dy.ptr, 1, DType::BF16, nullptr), Error);
  const QnPendingNorm no_parts{static_cast<const float*>(dx.ptr), 0, 1e-5f};
  EXPECT_THROW(gemv_qn(dw, dx.ptr, dy.ptr, 1, DType::F16, nullptr, {}, &no_parts), Error);
  EXPECT_THROW(gemv_qn_residual(dw, dx.ptr, dy.ptr, nullptr, dy.ptr, nullptr, 1, DType::F16, nullptr), Error);
  free_qn_weight(&dw);
}

}  // namespace
}  // namespace gemlite
