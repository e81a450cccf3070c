#pragma once
// The bounds every backend checks before a step's embed and attention (check_embed,
// check_cache_positions in runtime/backend.h), one body for the CPU backend's test and the
// CUDA backend's: token ids outside the embedding table and positions outside the KV cache
// are Errors, not reads or writes past their memory; ids and positions inside them run.
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

  const AttentionShape shape{2, 2, 16};  // heads of 16: the CUDA decode kernel's fused RoPE
  std::unique_ptr<KVCache> cache = backend.make_kv_cache(1, 4, shape);
  Tensor qkv = backend.alloc(1, 32 + 2 * 32), out = backend.alloc(1, 32);
  const std::vector<float> freq(8, 0.5f);
  const Tensor inv_freq = backend.upload(HostTensor::copy_of(DType::F32, {8}, freq.data()));
  backend.set_step({1}, 4);  // position 4 of 0..3
  EXPECT_THROW(backend.attention(*cache, 0, qkv, inv_freq, shape, out), Error);
  backend.set_step({1}, 3);
  EXPECT_NO_THROW(backend.attention(*cache, 0, qkv, inv_freq, shape, out));
  backend.synchronize();
}

}  // namespace gemlite
