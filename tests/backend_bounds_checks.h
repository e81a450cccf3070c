#pragma once
// The bounds every backend checks before a step's embed and attention (check_embed,
// check_cache_positions in runtime/backend.h), one body for the CPU backend's test and the
// CUDA backend's: token ids outside the embedding table and positions outside the KV cache
// are Errors, not reads or writes past their memory; ids and positions inside them run and
// give the right values.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/error.h"

namespace gemlite {

inline void expect_embed_and_cache_bounds_checked(Backend& backend) {
  std::vector<float> rows(3 * 8);  // 3 ids x 8
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(i + 1);
  const Tensor table = backend.upload(HostTensor::copy_of(DType::F32, {3, 8}, rows.data()));
  Tensor x = backend.alloc(1, 8);
  for (int bad : {3, -1}) {
    backend.set_step({bad}, 0);
    EXPECT_THROW(backend.embed(table, x), Error) << bad;
  }
  backend.set_step({0, 1}, 0);
  EXPECT_THROW(backend.embed(table, x), Error);  // two ids, one row of out
  backend.set_step({2}, 0);
  backend.embed(table, x);
  std::vector<float> got(8);
  backend.copy_to_host(x, got.data());
  EXPECT_EQ(got, std::vector<float>(rows.begin() + 16, rows.end()));  // row 2, exact in fp16 too

  // Attention over a cache of 4 positions: position 4 is refused; positions 0..3 run, each
  // step's q, k, v put in place by embed from row p of a table. q = 0 makes every score 0,
  // so the output at position p is the mean of v_0 .. v_p exactly (whatever RoPE does to
  // k), which takes reading back every earlier position's entry in the cache.
  const AttentionShape shape{2, 2, 16};  // heads of 16: the CUDA decode kernel's fused RoPE
  constexpr int kPositions = 4, kWidth = 32 + 2 * 32;  // q [2 x 16], k [2 x 16], v [2 x 16]
  std::unique_ptr<KVCache> cache = backend.make_kv_cache(1, kPositions, shape);
  std::vector<float> steps(kPositions * kWidth, 0.0f);  // [positions, q | k | v]
  for (int p = 0; p < kPositions; ++p)
    for (int c = 0; c < 32; ++c) {
      steps[size_t(p * kWidth + 32 + c)] = 0.25f * float((c + p) % 5) - 0.5f;  // k
      steps[size_t(p * kWidth + 64 + c)] = float(p + 1) * 0.125f * float(c % 8 + 1);  // v, exact in fp16
    }
  const Tensor step_table = backend.upload(HostTensor::copy_of(DType::F32, {kPositions, kWidth}, steps.data()));
  Tensor qkv = backend.alloc(1, kWidth), out = backend.alloc(1, 32);
  const std::vector<float> freq(8, 0.5f);
  const Tensor inv_freq = backend.upload(HostTensor::copy_of(DType::F32, {8}, freq.data()));
  backend.set_step({1}, kPositions);  // position 4 of 0..3
  EXPECT_THROW(backend.attention(*cache, 0, qkv, inv_freq, shape, out), Error);
  std::vector<float> mean(32, 0.0f), got_out(32);
  for (int p = 0; p < kPositions; ++p) {
    backend.set_step({p}, p);
    backend.embed(step_table, qkv);
    ASSERT_NO_THROW(backend.attention(*cache, 0, qkv, inv_freq, shape, out)) << "position " << p;
    backend.copy_to_host(out, got_out.data());
    for (int c = 0; c < 32; ++c) {
      mean[size_t(c)] += (steps[size_t(p * kWidth + 64 + c)] - mean[size_t(c)]) / float(p + 1);
      EXPECT_NEAR(got_out[size_t(c)], mean[size_t(c)], 1e-3f * mean[size_t(c)]) << "position " << p << ", column " << c;
    }
  }
  backend.synchronize();
}

}  // namespace gemlite
