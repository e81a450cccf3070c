#pragma once
// Checks on imported models shared by the importer tests.
#include <gtest/gtest.h>

#include <cstring>

#include "models/model_config.h"
#include "models/source_model.h"

namespace gemlite {

// `got` holds exactly the tensors of `want` (the same names), each of the same shape, type
// and bytes: two routes to the same model (Phi-3's fused tensors split back, say).
inline void expect_same_tensors(const SourceModel& got, const SourceModel& want) {
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  for (const auto& [name, expected] : want.tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.tensors.count(name));
    const HostTensor& t = got.tensors.at(name);
    ASSERT_EQ(t.shape, expected.shape);
    ASSERT_EQ(t.dtype, expected.dtype);
    EXPECT_EQ(0, std::memcmp(t.data, expected.data, expected.nbytes()));
  }
}

// Every field of two model configurations equal (floats exactly: the same value parsed or
// defaulted on two routes).
inline void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.hidden_dim, b.hidden_dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position, b.rope_scaling.original_max_position);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.bos_id, b.bos_id);
  EXPECT_EQ(a.eos_id, b.eos_id);
}

}  // namespace gemlite
