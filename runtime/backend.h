#pragma once
// The ops the model's forward pass is written against (models/llama_model.cpp). A
// backend owns its memory: weights are uploaded once, activations and the KV cache are
// allocated through it, and only logits come back to the host.
#include <memory>
#include <string>
#include <vector>

#include "runtime/host_tensor.h"
#include "runtime/quant_linear.h"
#include "runtime/tensor.h"

namespace gemlite {

// Keys and values of every layer for positions [0, capacity).
class KVCache {
 public:
  virtual ~KVCache() = default;
  int capacity() const { return capacity_; }

 protected:
  explicit KVCache(int capacity) : capacity_(capacity) {}

 private:
  int capacity_;
};

struct AttentionShape {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory
  virtual Tensor upload(const HostTensor& host) = 0;  // keeps host's dtype, 1-D -> [1, n]
  virtual Tensor alloc(int64_t rows, int64_t cols) = 0;  // activation dtype, uninitialised
  virtual std::unique_ptr<QuantLinear> make_linear(const PackedWeight& weight) = 0;
  virtual std::unique_ptr<KVCache> make_kv_cache(int n_layers, int capacity, int kv_dim) = 0;
  // x [M, N] -> host floats [M * N]
  virtual void copy_to_host(const Tensor& x, float* out) = 0;

  // ---- ops; shapes are [tokens, features]
  // out [T, dim] = table [vocab, dim] rows ids[0..T)
  virtual void embed(const Tensor& table, const std::vector<int>& ids, Tensor& out) = 0;
  // out [T, d] = x / rms(x) * weight [1, d]
  virtual void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;
  // Rotates q [T, n_heads*hd] and k [T, n_kv*hd] in place (rotate-half pairs (i, i+hd/2))
  // at positions pos0 + t, with inv_freq [hd/2] (Llama-3 scaling already folded in).
  virtual void rope(Tensor& q, Tensor& k, const AttentionShape& shape, int pos0,
                    const std::vector<float>& inv_freq) = 0;
  // Stores k, v [T, n_kv*hd] at positions pos0.. of `layer`, then causal attention of
  // q [T, n_heads*hd] over positions [0, pos0 + t] -> out [T, n_heads*hd].
  virtual void attention(KVCache& cache, int layer, int pos0, const Tensor& q, const Tensor& k,
                         const Tensor& v, const AttentionShape& shape, Tensor& out) = 0;
  // gate [T, h] = silu(gate) * up
  virtual void silu_mul(Tensor& gate, const Tensor& up) = 0;
  // x [T, d] += y [T, d]
  virtual void add(Tensor& x, const Tensor& y) = 0;
  virtual void synchronize() {}
};

// "cpu" or "cuda"; throws Error for unknown names or a build without CUDA.
std::unique_ptr<Backend> make_backend(const std::string& name);
// "cuda" when this build has CUDA and a GPU is present, else "cpu".
std::string default_backend_name();

}  // namespace gemlite
