// The CUDA backend's top_k (runtime/cuda/top_k.cu) against a host sort in the Sampler's
// order (more_likely) of the same stored values: ids and values must be equal exactly --
// selection does no arithmetic, so there is no tolerance. Inputs: fp16 and bf16 vectors of
// vocabulary sizes and awkward ones, with normal logits, heavy ties (five distinct values:
// the k-th falls inside a run of equal ones, which must be cut by lower id), and NaN,
// infinities, -0 and +0 mixed in; k from 1 to the device limit, and k = n (n = 256: several
// warps' keys, all taken).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cuda/ops.h"
#include "runtime/error.h"
#include "runtime/host_tensor.h"
#include "runtime/sampler.h"
#include "tests/gpu/gpu_test_helpers.h"

namespace gemlite {
namespace {

enum class Values { Normal, FiveValues, Specials };

// n values as stored in `dtype` (raw fp16/bf16 bits) and the floats they stand for.
HostTensor make_logits(DType dtype, int64_t n, Values kind, std::mt19937_64& rng, std::vector<float>* stored) {
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::uniform_int_distribution<int> pick(0, 99);
  const float five[] = {-1.5f, 0.0f, 2.25f, 7.0f, 7.5f};
  const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f};
  HostTensor t = HostTensor::zeros(dtype, {1, n});
  uint16_t* bits = t.mutable_as<uint16_t>();
  stored->resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    float v = normal(rng);
    if (kind == Values::FiveValues) v = five[pick(rng) % 5];
    if (kind == Values::Specials && pick(rng) < 10) v = specials[pick(rng) % 5];
    bits[i] = dtype == DType::F16 ? float_to_half(v) : float_to_bf16(v);
    (*stored)[size_t(i)] = dtype == DType::F16 ? half_to_float(bits[i]) : bf16_to_float(bits[i]);
  }
  return t;
}

std::vector<TokenCandidate> host_top_k(const std::vector<float>& values, int k) {
  std::vector<TokenCandidate> all(values.size());
  for (size_t i = 0; i < values.size(); ++i) all[i] = {int(i), values[i]};
  std::stable_sort(all.begin(), all.end(), more_likely);
  all.resize(size_t(k));
  return all;
}

bool same_value(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(float)) == 0;
}

TEST(CudaTopK, EqualsAHostSortInTheSamplersOrder) {
  std::mt19937_64 rng(test_seed());
  std::unique_ptr<Backend> backend = make_backend("cuda");
  ASSERT_EQ(backend->max_top_k(), kMaxTopK);
  int cases = 0;
  for (DType dtype : {DType::F16, DType::BF16})
    for (int64_t n : {int64_t(1), int64_t(5), int64_t(256), int64_t(1000), int64_t(32000), int64_t(32003),
                      int64_t(128256)})
      for (Values kind : {Values::Normal, Values::FiveValues, Values::Specials})
        for (int k : {1, 2, 40, 104, kMaxTopK, int(n)}) {
          if (k > n || k > kMaxTopK) continue;
          std::vector<float> stored;
          const Tensor logits = backend->upload(make_logits(dtype, n, kind, rng, &stored));
          std::vector<int> ids(size_t(k), -1);
          std::vector<float> values(size_t(k), 12345.0f);
          backend->top_k(logits, k, ids.data(), values.data());
          const std::vector<TokenCandidate> expected = host_top_k(stored, k);
          const std::string what = std::string(dtype_name(dtype)) + " n " + std::to_string(n) + " k " +
                                   std::to_string(k) + " values " + std::to_string(int(kind));
          for (int i = 0; i < k; ++i) {
            ASSERT_EQ(ids[size_t(i)], expected[size_t(i)].id) << what << " rank " << i;
            ASSERT_TRUE(same_value(values[size_t(i)], expected[size_t(i)].logit))
                << what << " rank " << i << ": " << values[size_t(i)] << " vs " << expected[size_t(i)].logit;
          }
          ++cases;
        }
  EXPECT_EQ(cases, 186);  // every (dtype, kind): 2 + 3 + 6 + 5 + 3 x 5 (n, k) pairs
}

TEST(CudaTopK, AllNaNGivesTheLowestIds) {
  std::unique_ptr<Backend> backend = make_backend("cuda");
  const int64_t n = 3000;
  HostTensor host = HostTensor::zeros(DType::F16, {1, n});
  std::fill(host.mutable_as<uint16_t>(), host.mutable_as<uint16_t>() + n, uint16_t(0x7e00));  // NaN
  const Tensor logits = backend->upload(host);
  std::vector<int> ids(8);
  std::vector<float> values(8);
  backend->top_k(logits, 8, ids.data(), values.data());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(ids[size_t(i)], i);
    EXPECT_TRUE(std::isnan(values[size_t(i)]));
  }
}

TEST(CudaTopK, BadKIsAnError) {
  std::unique_ptr<Backend> backend = make_backend("cuda");
  std::vector<float> stored;
  std::mt19937_64 rng(test_seed());
  const Tensor logits = backend->upload(make_logits(DType::F16, 1000, Values::Normal, rng, &stored));
  std::vector<int> ids(kMaxTopK + 1);
  std::vector<float> values(kMaxTopK + 1);
  EXPECT_THROW(backend->top_k(logits, kMaxTopK + 1, ids.data(), values.data()), Error);
  EXPECT_THROW(backend->top_k(logits, 0, ids.data(), values.data()), Error);
}

}  // namespace
}  // namespace gemlite
