#include "models/synthetic_model.h"

#include <algorithm>
#include <cstdint>

#include "runtime/error.h"

namespace gemlite {
namespace {

struct NamedShape {
  const char* name;
  int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len;
  float rope_theta;
  bool llama3_rope, tied;
};

// Published shapes (Hugging Face configs of each model).
const NamedShape kShapes[] = {
    {"llama2-7b", 4096, 11008, 32, 32, 32, 32000, 4096, 10000.0f, false, false},
    {"llama3-8b", 4096, 14336, 32, 32, 8, 128256, 8192, 500000.0f, true, false},
    {"mistral-7b", 4096, 14336, 32, 32, 8, 32000, 32768, 1000000.0f, false, false},
    {"tinyllama-1.1b", 2048, 5632, 22, 32, 4, 32000, 2048, 10000.0f, false, false},
    {"stories110m", 768, 2048, 12, 12, 12, 32000, 1024, 10000.0f, false, true},
    {"stories15m", 288, 768, 6, 6, 6, 32000, 256, 10000.0f, false, true},
    {"stories260k", 64, 172, 5, 8, 4, 512, 512, 10000.0f, false, true},
};

// splitmix64's finalizer: a well-mixed 64-bit hash of x.
uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<std::string> synthetic_model_names() {
  std::vector<std::string> names;
  for (const auto& shape : kShapes) names.push_back(shape.name);
  return names;
}

ModelConfig synthetic_config(const std::string& name) {
  for (const auto& s : kShapes) {
    if (name != s.name) continue;
    ModelConfig c;
    c.dim = s.dim;
    c.hidden_dim = s.hidden_dim;
    c.n_layers = s.n_layers;
    c.n_heads = s.n_heads;
    c.n_kv_heads = s.n_kv_heads;
    c.head_dim = s.dim / s.n_heads;
    c.vocab_size = s.vocab_size;
    c.max_seq_len = s.max_seq_len;
    c.rope_theta = s.rope_theta;
    c.tied_embeddings = s.tied;
    if (s.llama3_rope) c.rope_scaling = {"llama3", 8.0f, 1.0f, 4.0f, 8192};
    return c;
  }
  std::string known;
  for (const auto& n : synthetic_model_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("--synthetic '" + name + "': unknown model shape (known: " + known + ")");
}

PackedCheckpoint make_synthetic_checkpoint(const ModelConfig& c, const WeightFormat& format,
                                           uint64_t seed) {
  // Each weight is a hash of (seed, matrix, index), spread to ~N(0, 0.02²) as the sum of
  // four uniforms (Irwin-Hall: within 3.5 sigma, close enough for a speed benchmark), into
  // one buffer reused by every matrix. Per-row mt19937_64 + normal_distribution into a fresh
  // vector each time spent ~35 ns a weight on one thread, 37 % in the generator and 25 %
  // in the kernel zeroing new pages (perf, tinyllama-1.1b q4g64: 19.6 s on 2 threads).
  uint64_t matrix_index = 0;
  std::vector<float> values;  // [rows, cols] of the matrix being built
  auto random_matrix = [&](int64_t rows, int64_t cols) -> const float* {
    values.resize(std::max(values.size(), size_t(rows * cols)));
    // Seed and matrix mixed first: added as they were, seed s + 1 gave seed s's weights
    // shifted by one element.
    const uint64_t base = mix64(seed ^ mix64(++matrix_index));
    float* out = values.data();
    const int64_t count = rows * cols;
    // sqrt(12 / 4) * 0.02 / 65536: four 16-bit uniforms summed have variance 4 * 65536² / 12.
    constexpr float kSpread = 1.7320508f * 0.02f / 65536.0f;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t h = mix64(base + uint64_t(i) * 0x9E3779B97F4A7C15ull);
      // Four values in [0, 65535], centred: mean 0 (2 * 65535 = 4 times their mean).
      const int32_t sum = int32_t(h & 0xFFFF) + int32_t(h >> 16 & 0xFFFF) + int32_t(h >> 32 & 0xFFFF) +
                          int32_t(h >> 48) - 2 * 65535;
      out[i] = float(sum) * kSpread;
    }
    return out;
  };
  auto linear = [&](int64_t rows, int64_t cols) {
    return quantize_weight(random_matrix(rows, cols), rows, cols, format);
  };
  auto ones = [&](int64_t n) {
    HostTensor t = HostTensor::zeros(DType::F32, {n});
    for (int64_t i = 0; i < n; ++i) t.mutable_as<float>()[i] = 1.0f;
    return t;
  };

  PackedCheckpoint ckpt;
  ckpt.config = c;
  ckpt.default_format = format.name();
  WeightFormat embedding_format;
  embedding_format.kind = FormatKind::Dense;
  embedding_format.dense_dtype = embedding_dtype_for(format);
  const PackedWeight embedding = quantize_weight(random_matrix(c.vocab_size, c.dim),
                                                 c.vocab_size, c.dim, embedding_format);
  ckpt.embedding = embedding.part("weight");
  ckpt.final_norm = ones(c.dim);
  for (int l = 0; l < c.n_layers; ++l) {
    PackedLayer layer;
    layer.attn_norm = ones(c.dim);
    layer.ffn_norm = ones(c.dim);
    layer.q = linear(c.q_dim(), c.dim);
    layer.k = linear(c.kv_dim(), c.dim);
    layer.v = linear(c.kv_dim(), c.dim);
    layer.o = linear(c.dim, c.q_dim());
    layer.gate = linear(c.hidden_dim, c.dim);
    layer.up = linear(c.hidden_dim, c.dim);
    layer.down = linear(c.dim, c.hidden_dim);
    ckpt.layers.push_back(std::move(layer));
  }
  ckpt.lm_head = linear(c.vocab_size, c.dim);
  return ckpt;
}

}  // namespace gemlite
