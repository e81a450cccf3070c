// concat_rows (weights stacked along N) and FusedLinear (q/k/v and gate/up as one
// projection): the stacked weight decodes row for row to its parts, and the fused
// projection equals the parts' projections side by side, stacked or not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/packed_weight.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/fused_linear.h"
#include "tests/backend_bounds_checks.h"

namespace gemlite {
namespace {

const char* const kFormats[] = {"q4g64", "q3g32", "q8", "s7", "fp6", "fp5", "f32", "f16", "bf16"};

PackedWeight random_weight(int64_t N, int64_t K, const std::string& format, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> w(size_t(N * K));
  for (float& v : w) v = uniform(rng);
  return quantize_weight(w.data(), N, K, WeightFormat::parse(format));
}

void add_random_bias(PackedWeight* w, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> bias(size_t(w->rows));
  for (float& v : bias) v = uniform(rng);
  w->parts["bias"] = HostTensor::copy_of(DType::F32, {w->rows}, bias.data());
}

// x [M, K] on the CPU backend, uniform in [-1, 1); its values in `values`.
Tensor random_input(Backend& backend, int64_t M, int64_t K, std::mt19937& rng, std::vector<float>* values) {
  std::uniform_real_distribution<float> uniform(-1, 1);
  values->resize(size_t(M * K));
  for (float& value : *values) value = uniform(rng);
  Tensor x = backend.alloc(M, K);  // [M, K]
  std::memcpy(x.data, values->data(), values->size() * sizeof(float));
  return x;
}

// The parts' outputs side by side: y [M, sum N] from each part's linear_reference.
std::vector<float> side_by_side(const std::vector<const PackedWeight*>& parts, const std::vector<float>& x,
                                int64_t M) {
  int64_t total = 0;
  for (const PackedWeight* w : parts) total += w->rows;
  std::vector<float> y(size_t(M * total));
  int64_t col = 0;
  for (const PackedWeight* w : parts) {
    std::vector<float> part(size_t(M * w->rows));
    linear_reference(*w, x.data(), M, part.data());
    for (int64_t m = 0; m < M; ++m)
      std::memcpy(&y[m * total + col], &part[m * w->rows], w->rows * sizeof(float));
    col += w->rows;
  }
  return y;
}

TEST(ConcatRows, EveryFormatDecodesRowForRowToItsPartsAndKeepsTheirBiases) {
  std::mt19937 rng(21);
  const int64_t K = 300;  // not a multiple of any group or tile
  for (const char* format : kFormats) {
    SCOPED_TRACE(format);
    // FPX stores rows in blocks of 16: parts before the last must fill theirs.
    PackedWeight a = random_weight(32, K, format, rng), b = random_weight(16, K, format, rng),
                 c = random_weight(21, K, format, rng);
    add_random_bias(&b, rng);  // Qwen2-like: only some parts carry a bias here
    const std::vector<const PackedWeight*> parts = {&a, &b, &c};
    const std::optional<PackedWeight> stacked = concat_rows(parts);
    ASSERT_TRUE(stacked.has_value());
    ASSERT_EQ(stacked->rows, 32 + 16 + 21);
    ASSERT_EQ(stacked->cols, K);
    validate_packed_weight(*stacked, "stacked");

    std::vector<float> row(static_cast<size_t>(K)), expected(static_cast<size_t>(K));
    int64_t n = 0;
    for (const PackedWeight* w : parts) {
      for (int64_t i = 0; i < w->rows; ++i, ++n) {
        dequantize_row(*stacked, n, row.data());
        dequantize_row(*w, i, expected.data());
        ASSERT_EQ(row, expected) << "row " << n;
      }
    }
    const float* bias = stacked->part("bias").as<float>();  // [69]
    for (int64_t i = 0; i < 69; ++i) {
      const float want = i >= 32 && i < 48 ? b.part("bias").as<float>()[i - 32] : 0.0f;
      ASSERT_EQ(bias[i], want) << "bias " << i;
    }
  }
}

TEST(ConcatRows, RefusesWhatCannotBeStackedExactly) {
  std::mt19937 rng(22);
  const PackedWeight q4 = random_weight(16, 64, "q4g64", rng), q8 = random_weight(16, 64, "q8", rng);
  EXPECT_FALSE(concat_rows({&q4, &q8}).has_value()) << "different formats";
  const PackedWeight q4_wider = random_weight(16, 128, "q4g64", rng);
  EXPECT_FALSE(concat_rows({&q4, &q4_wider}).has_value()) << "different K";
  const PackedWeight f16 = random_weight(16, 64, "f16", rng), bf16 = random_weight(16, 64, "bf16", rng);
  EXPECT_FALSE(concat_rows({&f16, &bf16}).has_value()) << "different dense types";
  // An FPX part of 24 rows leaves 8 padded rows in its second block: not stackable before
  // another part, fine as the last one.
  const PackedWeight fp6_24 = random_weight(24, 64, "fp6", rng), fp6_16 = random_weight(16, 64, "fp6", rng);
  EXPECT_FALSE(concat_rows({&fp6_24, &fp6_16}).has_value());
  EXPECT_TRUE(concat_rows({&fp6_16, &fp6_24}).has_value());
  EXPECT_FALSE(concat_rows({}).has_value());
}

// FusedLinear on the CPU backend, stacked (same formats) and separate (mixed formats, as
// gemlite-quantize overrides can make them): y equals the parts' outputs side by side.
TEST(FusedLinear, EqualsThePartsSideBySideStackedOrNot) {
  std::mt19937 rng(23);
  const int64_t K = 96, M = 3;
  const PackedWeight q = random_weight(48, K, "q4g32", rng), k = random_weight(16, K, "q4g32", rng),
                     v = random_weight(16, K, "q4g32", rng), v8 = random_weight(16, K, "q8", rng);
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::vector<float> x_values;
  Tensor x = random_input(*backend, M, K, rng, &x_values);  // [M, K]

  for (const bool mixed : {false, true}) {
    SCOPED_TRACE(mixed ? "mixed formats" : "one format");
    const std::vector<const PackedWeight*> parts = {&q, &k, mixed ? &v8 : &v};
    const FusedLinear fused(parts, *backend, /*max_rows=*/4);
    EXPECT_EQ(fused.stacked(), !mixed);
    ASSERT_EQ(fused.out_features(), 80);
    Tensor y = backend->alloc(M, 80);  // [M, 80]
    fused.forward(x, y);
    const std::vector<float> expected = side_by_side(parts, x_values, M);
    EXPECT_EQ(std::vector<float>(y.as<float>(), y.as<float>() + M * 80), expected);
  }
}

// forward_swiglu of a [gate; up] pair made with StackedUse::SwiGLU: silu(gate) * up of the
// parts' own outputs (the CPU backend has no one-pass form, so this is the two-pass path
// every backend falls back to), stacked or not; misuse is an Error.
TEST(FusedLinear, SwigluIsSiluOfGateTimesUp) {
  std::mt19937 rng(25);
  const int64_t K = 96, M = 3, H = 24;
  const PackedWeight gate = random_weight(H, K, "q4g32", rng), up = random_weight(H, K, "q4g32", rng),
                     up8 = random_weight(H, K, "q8", rng);
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::vector<float> x_values;
  Tensor x = random_input(*backend, M, K, rng, &x_values);  // [M, K]
  for (const bool mixed : {false, true}) {
    SCOPED_TRACE(mixed ? "mixed formats" : "one format");
    const std::vector<const PackedWeight*> parts = {&gate, mixed ? &up8 : &up};
    const FusedLinear fused(parts, *backend, /*max_rows=*/4, StackedUse::SwiGLU);
    Tensor gate_up = backend->alloc(M, 2 * H), y = backend->alloc(M, H);  // [M, 2H], [M, H]
    fused.forward_swiglu(x, gate_up, y);
    const std::vector<float> both = side_by_side(parts, x_values, M);  // [M, 2H]
    for (int64_t m = 0; m < M; ++m)
      for (int64_t i = 0; i < H; ++i) {
        const float g = both[size_t(m * 2 * H + i)], u = both[size_t(m * 2 * H + H + i)];
        EXPECT_NEAR(y.as<float>()[m * H + i], g / (1.0f + std::exp(-g)) * u, 1e-6f * (1 + std::abs(g * u)))
            << "m " << m << " i " << i;
      }
  }
  const FusedLinear concat({&gate, &up}, *backend, 4);
  Tensor gate_up = backend->alloc(M, 2 * H), y = backend->alloc(M, H);
  EXPECT_THROW(concat.forward_swiglu(x, gate_up, y), Error);  // not made for SwiGLU
  const PackedWeight short_up = random_weight(H - 8, K, "q4g32", rng);
  EXPECT_THROW(FusedLinear({&gate, &short_up}, *backend, 4, StackedUse::SwiGLU), Error);  // unequal halves
}

TEST(FusedLinear, WrongShapesAreErrorsNotOverruns) {
  std::mt19937 rng(24);
  const PackedWeight a = random_weight(16, 32, "q4g32", rng), b = random_weight(16, 32, "q8", rng);
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const FusedLinear fused({&a, &b}, *backend, /*max_rows=*/2);  // mixed: scratch of 2 rows
  Tensor x = backend->alloc(3, 32), y = backend->alloc(3, 32), narrow = backend->alloc(2, 31);
  EXPECT_THROW(fused.forward(x, y), Error);                        // more rows than the scratch
  EXPECT_THROW(fused.forward(x.slice_rows(0, 2), narrow), Error);  // y has 31 columns, not 32
}

// The CPU backend's linears keep the RMSNorm a separate op (fuses_rmsnorm false), so the
// model never hands them a pending norm; asked anyway, they refuse instead of computing
// something else.
TEST(FusedLinear, CpuLinearsDoNotTakeAPendingNorm) {
  std::mt19937 rng(26);
  const PackedWeight a = random_weight(16, 32, "q4g32", rng), b = random_weight(16, 32, "q4g32", rng);
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const FusedLinear fused({&a, &b}, *backend, /*max_rows=*/2, StackedUse::SwiGLU);
  const std::unique_ptr<QuantLinear> one = backend->make_linear(a);
  EXPECT_FALSE(fused.fuses_rmsnorm(1));
  EXPECT_FALSE(one->fuses_rmsnorm(1));
  Tensor x = backend->alloc(1, 32), y = backend->alloc(1, 32), h = backend->alloc(1, 16), r = backend->alloc(1, 16);
  const PendingNorm pending{backend->alloc(1, 2), 1e-5f};
  EXPECT_THROW(fused.forward(x, y, &pending), Error);
  Tensor gate_up = backend->alloc(1, 32);
  EXPECT_THROW(fused.forward_swiglu(x, gate_up, h, &pending), Error);
  EXPECT_THROW(one->forward_normed(x, pending, h), Error);
  EXPECT_THROW(one->forward_residual(x, r, backend->alloc(1, 16), 1e-5f, h), Error);
}

TEST(BackendOps, FusedLayoutShapesAreChecked) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  Tensor gate_up = backend->alloc(2, 10), out = backend->alloc(2, 4);
  EXPECT_THROW(backend->silu_mul(gate_up, out), Error);  // 10 != 2 * 4
  Tensor src = backend->alloc(2, 3), dst = backend->alloc(2, 5);
  EXPECT_THROW(backend->copy_columns(src, dst, 3), Error);  // columns 3..5 of 5
  EXPECT_NO_THROW(backend->copy_columns(src, dst, 2));
  std::unique_ptr<KVCache> cache = backend->make_kv_cache(1, 4, AttentionShape{2, 2, 4});
  backend->set_step({1}, 0);
  Tensor qkv = backend->alloc(1, 16 + 2 * 8), attn = backend->alloc(1, 16);
  EXPECT_THROW(backend->attention(*cache, 0, qkv, backend->alloc(1, 2), AttentionShape{2, 1, 4}, attn), Error);
}

// A direct user of a backend (no LlamaModel checks before it): tests/backend_bounds_checks.h.
TEST(BackendOps, EmbedIdsAndCachePositionsAreChecked) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  expect_embed_and_cache_bounds_checked(*backend);
}

// top_k: the k largest, largest first, equal values by lower index; k out of range is an Error.
TEST(BackendOps, TopKTakesTheLargestInTheSamplersOrder) {
  auto backend = make_cpu_backend();
  const std::vector<float> values = {1, 5, std::nanf(""), 3, 5, -2, 3, 7};
  const Tensor t = backend->upload(HostTensor::copy_of(DType::F32, {1, int64_t(values.size())}, values.data()));
  int ids[4];
  float top[4];
  backend->top_k(t, 4, ids, top);
  EXPECT_EQ(std::vector<int>(ids, ids + 4), (std::vector<int>{7, 1, 4, 3}));
  EXPECT_EQ(std::vector<float>(top, top + 4), (std::vector<float>{7, 5, 5, 3}));
  int all_ids[8];
  float all_values[8];
  backend->top_k(t, 8, all_ids, all_values);
  EXPECT_EQ(all_ids[7], 2) << "NaN ranks last";
  EXPECT_THROW(backend->top_k(t, 0, ids, top), Error);
  EXPECT_THROW(backend->top_k(t, 9, all_ids, all_values), Error);
}

// Greedy argmax: the lowest index among equal maxima, NaNs skipped (the CUDA kernel's
// rule, runtime/cuda/argmax.cu), 0 when every value is NaN.
TEST(BackendOps, ArgmaxSkipsNanAndTakesTheLowestIndexOfATie) {
  auto backend = make_cpu_backend();
  const float nan = std::nanf("");
  auto argmax_of = [&](std::vector<float> values) {
    const Tensor t = backend->upload(HostTensor::copy_of(DType::F32, {1, int64_t(values.size())}, values.data()));
    return backend->argmax(t);
  };
  EXPECT_EQ(argmax_of({1, 3, 2, 3}), 1);
  EXPECT_EQ(argmax_of({nan, 1, 5, nan, 5}), 2);
  EXPECT_EQ(argmax_of({-2, nan, -1}), 2);
  EXPECT_EQ(argmax_of({nan, nan}), 0);
}

// upload keeps a 2-D tensor's shape, makes a 1-D one a row, and refuses more dimensions
// (the CUDA backend had allocated one row and copied the whole tensor into it).
TEST(BackendOps, UploadTakesOneOrTwoDimensions) {
  auto backend = make_cpu_backend();
  const std::vector<float> values(12, 1.0f);
  const Tensor matrix = backend->upload(HostTensor::copy_of(DType::F32, {3, 4}, values.data()));
  EXPECT_EQ(matrix.rows, 3);
  EXPECT_EQ(matrix.cols, 4);
  const Tensor row = backend->upload(HostTensor::copy_of(DType::F32, {12}, values.data()));
  EXPECT_EQ(row.rows, 1);
  EXPECT_EQ(row.cols, 12);
  EXPECT_THROW(backend->upload(HostTensor::copy_of(DType::F32, {2, 2, 3}, values.data())), Error);
}

}  // namespace
}  // namespace gemlite
