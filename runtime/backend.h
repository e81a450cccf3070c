#pragma once
// The ops the model's forward pass is written against (models/llama_model.cpp). A
// backend owns its memory: weights are uploaded once, activations and the KV cache are
// allocated through it, and only logits (or just the sampled id) come back to the host.
//
// A forward is a *step*: set_step() hands over the token ids and the first position,
// then the ops run. Ops read the step's ids and positions from backend memory, never from
// arguments, so a recorded sequence of ops (run_captured: a CUDA graph) replays correctly
// for every new token.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
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

// A sequence of ops recorded by Backend::run_captured (a CUDA graph); owned by whoever
// recorded it, and valid as long as the tensors its ops touched.
class CapturedOps {
 public:
  virtual ~CapturedOps() = default;
};

// How to make a backend. The CPU backend always computes in fp32 and ignores both.
struct BackendOptions {
  DType activations = DType::F16;  // cuda: F16 or BF16 activations and KV cache
  bool graphs = true;              // cuda: replay captured decode steps (env GEMLITE_NO_GRAPH=1: off)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual DType activation_type() const = 0;

  // ---- memory
  // Bytes in use on the backend's device, everyone's allocations and the driver's included
  // (cuda: total minus free), or -1 for a backend without memory of its own (cpu).
  virtual int64_t device_memory_used() const { return -1; }
  virtual Tensor upload(const HostTensor& host) = 0;  // keeps host's dtype, 1-D -> [1, n]
  virtual Tensor alloc(int64_t rows, int64_t cols) = 0;  // activation dtype, uninitialised
  virtual std::unique_ptr<QuantLinear> make_linear(const PackedWeight& weight) = 0;
  // One QuantLinear over `weights` stacked along N (concat_rows): y [M, sum N_i]. Null when
  // they cannot be stacked (see concat_rows). The CPU computes over a stacked host copy;
  // the CUDA backend uploads it and keeps only the checkpoint's views, and for
  // StackedUse::SwiGLU lays qN weights out for its one-pass forward_swiglu.
  virtual std::unique_ptr<QuantLinear> make_stacked_linear(const std::vector<const PackedWeight*>& weights,
                                                           StackedUse /*use*/ = StackedUse::Concat) {
    const std::optional<PackedWeight> stacked = concat_rows(weights);
    return stacked ? make_linear(*stacked) : nullptr;
  }
  // Keys and values [capacity, n_kv_heads * head_dim] for each layer (and whatever the
  // backend's attention keeps per cache for that shape).
  virtual std::unique_ptr<KVCache> make_kv_cache(int n_layers, int capacity, const AttentionShape& shape) = 0;
  // x [M, N] -> host floats [M * N]; waits for the work before it.
  virtual void copy_to_host(const Tensor& x, float* out) = 0;
  // The index of the largest element of x [1, N] (the lowest among equal ones, like
  // Sampler's greedy choice; NaNs skipped, 0 when all are NaN); waits for the work before
  // it. Only the index crosses.
  virtual int argmax(const Tensor& x) = 0;
  // The k largest elements of x [1, N] (1 <= k <= min(N, max_top_k())) and their column
  // ids in the Sampler's order (more_likely: largest first, equal by lower id, NaN last);
  // waits for the work before it. Here over a host copy; the CUDA backend selects on the
  // device, so only the k pairs cross (Sampler::sample_top draws from them).
  virtual void top_k(const Tensor& x, int k, int* ids, float* values);
  virtual int max_top_k() const { return 1 << 30; }

  // ---- the step: ids [T] at positions [pos0, pos0 + T). Ids are checked by the caller.
  // At most max_step_tokens() per step.
  virtual void set_step(const std::vector<int>& ids, int pos0) = 0;
  virtual int max_step_tokens() const = 0;

  // ---- ops; shapes are [tokens, features], T = the step's token count
  // out [T, dim] = table [vocab, dim] rows of the step's ids
  virtual void embed(const Tensor& table, Tensor& out) = 0;
  // out [T, d] = x / rms(x) * weight [1, d]
  virtual void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;
  // x [T, d] += y [T, d], then out [T, d] = rmsnorm(x) (out may be y): a block's output
  // joins the residual stream and the next block's input is normed, in one pass.
  virtual void add_rmsnorm(Tensor& x, const Tensor& y, const Tensor& weight, float eps, Tensor& out) = 0;
  // Self-attention at the step's positions pos0 + t. qkv [T, (n_heads + 2 n_kv) hd] holds
  // each token's q, k and v side by side (the output of one fused projection). Rotates q
  // and k (RoPE, rotate-half pairs (i, i+hd/2), inv_freq [1, hd/2] F32 with any Llama-3
  // scaling folded in), stores k and v in `layer` of the cache, then causal attention of q
  // over positions [0, pos0 + t] -> out [T, n_heads*hd]. The q and k columns of qkv may
  // be overwritten.
  virtual void attention(KVCache& cache, int layer, Tensor& qkv, const Tensor& inv_freq,
                         const AttentionShape& shape, Tensor& out) = 0;
  // out [T, h] = silu(gate_up[:, :h]) * gate_up[:, h:], gate_up [T, 2h] (SwiGLU)
  virtual void silu_mul(const Tensor& gate_up, Tensor& out) = 0;
  // dst[:, col0 : col0 + src.cols] = src, src [T, n], dst [T, N]
  virtual void copy_columns(const Tensor& src, Tensor& dst, int64_t col0) = 0;

  // Runs `ops` (ops only: no set_step, nothing read back) on this step. A backend that
  // can record does so the first time (into `captured`) and replays the record on every
  // later call instead of calling `ops`; the CPU backend just calls `ops`. The caller
  // keeps the tensors the ops touch alive and in place as long as `captured`.
  virtual void run_captured(std::unique_ptr<CapturedOps>& captured, const std::function<void()>& ops) {
    (void)captured;
    ops();
  }
  virtual void synchronize() {}
};

// The [rows, cols] both backends give an upload of `host`: 2-D as it is, 1-D (or a
// scalar) as one row; Error for more dimensions (the CUDA backend had copied all of such a
// tensor's bytes into one row's allocation).
std::pair<int64_t, int64_t> upload_shape(const HostTensor& host);

// The shape checks both backends make before an op (Error naming the op and the shapes).
void check_attention_shapes(const Tensor& qkv, const AttentionShape& shape, const Tensor& out);
void check_silu_mul_shapes(const Tensor& gate_up, const Tensor& out);
void check_copy_columns_shapes(const Tensor& src, const Tensor& dst, int64_t col0);
// The step's ids [n] inside the table's rows, out [n, table.cols]; the step's positions
// [pos0, pos0 + T) inside the cache. LlamaModel checks ids and context before a step; these
// keep a direct user of a backend from reading or writing past its memory.
void check_embed(const Tensor& table, const int* ids, int64_t n, const Tensor& out);
void check_cache_positions(const KVCache& cache, int pos0, int64_t T);

// Throws make_backend's Error for a name it would refuse (unknown; "cuda" in a build
// without CUDA or with no usable device), without making a backend: a program checks its
// --device before it prints or measures anything.
void check_backend(const std::string& name);
// "cpu" or "cuda"; throws check_backend's Error.
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options = {});
// "cuda" when this build has CUDA and a GPU is present, else "cpu".
std::string default_backend_name();
// "f16" / "bf16" -> F16 / BF16 (the activation types of --dtype); Error otherwise.
DType parse_activation_type(const std::string& name);

}  // namespace gemlite
