#include "runtime/cpu/cpu_backend.h"

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/error.h"

namespace gemlite {
namespace {

class CpuLinear final : public QuantLinear {
 public:
  explicit CpuLinear(const PackedWeight& weight) : QuantLinear(weight), weight_(weight) {}
  void forward(const Tensor& x, Tensor& y) const override {
    if (x.cols != in_features() || y.cols != out_features() || y.rows != x.rows)
      throw Error("CpuLinear: x [" + std::to_string(x.rows) + ", " + std::to_string(x.cols) + "] -> y [" +
                  std::to_string(y.rows) + ", " + std::to_string(y.cols) + "] for a [" +
                  std::to_string(out_features()) + ", " + std::to_string(in_features()) + "] weight");
    linear_reference(weight_, x.as<float>(), x.rows, y.as<float>());
  }

 private:
  // Views the checkpoint's mapping, except a stacked q/k/v or gate/up weight
  // (make_stacked_linear), which owns its host copy.
  PackedWeight weight_;
};

class CpuKVCache final : public KVCache {
 public:
  CpuKVCache(int n_layers, int capacity, int kv_dim)
      : KVCache(capacity), kv_dim(kv_dim),
        keys(size_t(n_layers) * capacity * kv_dim), values(keys.size()) {}
  float* key(int layer, int pos) { return &keys[(size_t(layer) * capacity() + pos) * kv_dim]; }
  float* value(int layer, int pos) { return &values[(size_t(layer) * capacity() + pos) * kv_dim]; }

  int kv_dim;
  std::vector<float> keys;    // [n_layers, capacity, kv_dim]
  std::vector<float> values;  // [n_layers, capacity, kv_dim]
};

// Reads element i of a F32/F16/BF16 row as float.
float load_as_float(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::F32: return t.as<float>()[i];
    case DType::F16: return half_to_float(t.as<uint16_t>()[i]);
    case DType::BF16: return bf16_to_float(t.as<uint16_t>()[i]);
    default: throw Error(std::string("cpu backend: unsupported tensor type ") + dtype_name(t.dtype));
  }
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  DType activation_type() const override { return DType::F32; }

  Tensor upload(const HostTensor& host) override {
    Tensor t;
    t.dtype = host.dtype;
    std::tie(t.rows, t.cols) = upload_shape(host);
    t.data = const_cast<uint8_t*>(host.data);  // weights are read-only; the mapping is shared
    t.storage = std::const_pointer_cast<void>(host.owner);
    return t;
  }

  Tensor alloc(int64_t rows, int64_t cols) override {
    auto storage = std::make_shared<std::vector<float>>(size_t(rows * cols));
    Tensor t;
    t.rows = rows;
    t.cols = cols;
    t.data = storage->data();
    t.storage = storage;
    return t;
  }

  std::unique_ptr<QuantLinear> make_linear(const PackedWeight& weight) override {
    return std::make_unique<CpuLinear>(weight);
  }

  std::unique_ptr<KVCache> make_kv_cache(int n_layers, int capacity, const AttentionShape& shape) override {
    return std::make_unique<CpuKVCache>(n_layers, capacity, shape.n_kv_heads * shape.head_dim);
  }

  void copy_to_host(const Tensor& x, float* out) override {
    std::memcpy(out, x.data, size_t(x.numel()) * sizeof(float));
  }

  int argmax(const Tensor& x) override {
    const float* v = x.as<float>();
    int best = -1;
    for (int64_t i = 0; i < x.numel(); ++i)
      if (!std::isnan(v[i]) && (best < 0 || v[i] > v[best])) best = int(i);  // strict: the lowest index wins a tie
    return best < 0 ? 0 : best;  // all NaN: 0, as the CUDA kernel
  }

  void set_step(const std::vector<int>& ids, int pos0) override {
    step_ids_ = ids;
    step_pos0_ = pos0;
  }
  int max_step_tokens() const override { return 1 << 30; }

  void embed(const Tensor& table, Tensor& out) override {
    check_embed(table, step_ids_.data(), int64_t(step_ids_.size()), out);
    for (size_t t = 0; t < step_ids_.size(); ++t)
      for (int64_t i = 0; i < table.cols; ++i)
        out.as<float>()[t * out.cols + i] = load_as_float(table, step_ids_[t] * table.cols + i);
  }

  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    const int64_t d = x.cols;
#pragma omp parallel for
    for (int64_t t = 0; t < x.rows; ++t) {
      const float* row = x.as<float>() + t * d;
      double sum_squares = 0;
      for (int64_t i = 0; i < d; ++i) sum_squares += double(row[i]) * row[i];
      const float inv_rms = float(1.0 / std::sqrt(sum_squares / double(d) + eps));
      for (int64_t i = 0; i < d; ++i)
        out.as<float>()[t * d + i] = row[i] * inv_rms * load_as_float(weight, i);
    }
  }

  void add_rmsnorm(Tensor& x, const Tensor& y, const Tensor& weight, float eps, Tensor& out) override {
    add(x, y);
    rmsnorm(x, weight, eps, out);
  }

  void attention(KVCache& kv, int layer, Tensor& qkv, const Tensor& inv_freq, const AttentionShape& shape,
                 Tensor& out) override {
    check_attention_shapes(qkv, shape, out);
    check_cache_positions(kv, step_pos0_, qkv.rows);
    rope(qkv, shape, inv_freq);
    attend(kv, layer, qkv, shape, out);
  }

  void silu_mul(const Tensor& gate_up, Tensor& out) override {
    check_silu_mul_shapes(gate_up, out);
    const int64_t h = out.cols;
#pragma omp parallel for
    for (int64_t t = 0; t < out.rows; ++t) {
      const float* gate = gate_up.as<float>() + t * gate_up.cols;  // [h]
      const float* up = gate + h;                                    // [h]
      float* dst = out.as<float>() + t * h;                          // [h]
      for (int64_t i = 0; i < h; ++i) dst[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    }
  }

  void copy_columns(const Tensor& src, Tensor& dst, int64_t col0) override {
    check_copy_columns_shapes(src, dst, col0);
    for (int64_t t = 0; t < src.rows; ++t)
      std::memcpy(dst.as<float>() + t * dst.cols + col0, src.as<float>() + t * src.cols, src.cols * sizeof(float));
  }

 private:
  // Rotates the q and k heads of qkv [T, (n_heads + 2 n_kv) hd] in place: the first
  // n_heads + n_kv heads of each row.
  void rope(Tensor& qkv, const AttentionShape& shape, const Tensor& inv_freq_table) {
    const int half = shape.head_dim / 2;
    const float* inv_freq = inv_freq_table.as<float>();  // [hd/2]
    const int pos0 = step_pos0_;
#pragma omp parallel for
    for (int64_t t = 0; t < qkv.rows; ++t) {
      std::vector<float> cos_table(half), sin_table(half);
      for (int i = 0; i < half; ++i) {
        const float angle = float(pos0 + t) * inv_freq[i];  // fp32 like Hugging Face
        cos_table[i] = std::cos(angle);
        sin_table[i] = std::sin(angle);
      }
      for (int h = 0; h < shape.n_heads + shape.n_kv_heads; ++h) {
        float* head = qkv.as<float>() + t * qkv.cols + h * shape.head_dim;  // [hd]
        for (int i = 0; i < half; ++i) {
          const float a = head[i], b = head[i + half];
          head[i] = a * cos_table[i] - b * sin_table[i];
          head[i + half] = b * cos_table[i] + a * sin_table[i];
        }
      }
    }
  }

  // Stores k, v at the step's positions, then causal attention of q (all in qkv).
  void attend(KVCache& kv, int layer, const Tensor& qkv, const AttentionShape& shape, Tensor& out) {
    auto& cache = static_cast<CpuKVCache&>(kv);
    const int pos0 = step_pos0_;
    const int64_t T = qkv.rows;
    const int64_t q_dim = int64_t(shape.n_heads) * shape.head_dim, kv_dim = int64_t(shape.n_kv_heads) * shape.head_dim;
    for (int64_t t = 0; t < T; ++t) {
      const float* row = qkv.as<float>() + t * qkv.cols;  // [q_dim + 2 kv_dim]
      std::memcpy(cache.key(layer, pos0 + t), row + q_dim, kv_dim * sizeof(float));
      std::memcpy(cache.value(layer, pos0 + t), row + q_dim + kv_dim, kv_dim * sizeof(float));
    }
    const int hd = shape.head_dim;
    const int group = shape.n_heads / shape.n_kv_heads;  // query heads per kv head
    const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int64_t t = 0; t < T; ++t) {
      for (int h = 0; h < shape.n_heads; ++h) {
        const int n_pos = pos0 + int(t) + 1;  // causal: positions [0, pos0 + t]
        const int kv_offset = (h / group) * hd;
        const float* query = qkv.as<float>() + t * qkv.cols + h * hd;  // [hd]
        std::vector<float> scores(n_pos);
        float max_score = -INFINITY;
        for (int p = 0; p < n_pos; ++p) {
          const float* key = cache.key(layer, p) + kv_offset;
          float dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int i = 0; i < hd; ++i) dot += query[i] * key[i];
          scores[p] = dot * scale;
          max_score = std::max(max_score, scores[p]);
        }
        float sum = 0;
        for (float& s : scores) sum += (s = std::exp(s - max_score));
        float* result = out.as<float>() + t * out.cols + h * hd;
        std::fill(result, result + hd, 0.0f);
        for (int p = 0; p < n_pos; ++p) {
          const float* value = cache.value(layer, p) + kv_offset;
          const float weight = scores[p] / sum;
#pragma omp simd
          for (int i = 0; i < hd; ++i) result[i] += weight * value[i];
        }
      }
    }
  }

  void add(Tensor& x, const Tensor& y) {
    float* a = x.as<float>();
    const float* b = y.as<float>();
    for (int64_t i = 0; i < x.numel(); ++i) a[i] += b[i];
  }

  std::vector<int> step_ids_;  // [T] of the current step
  int step_pos0_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace gemlite
