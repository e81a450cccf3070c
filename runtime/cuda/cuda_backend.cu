#include "runtime/cuda/cuda_backend.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_linear.h"
#include "runtime/cuda/ops.h"
#include "runtime/cuda/prefill_attention.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

// Tokens one step takes: the model's chunks (512 by default, LlamaModel::kDefaultMaxChunk;
// gemlite-bench -b sets up to this).
constexpr int kMaxStepTokens = 8192;

// GEMLITE_NO_ATTENTION_SPLITS=1: decode attention with one block per head whatever the
// context; GEMLITE_ATTENTION_SPLITS=N: N splits instead of attention_splits_for's count
// (A/B measurements of the split, e.g. gemlite-bench -d 4096).
// GEMLITE_NO_GROUPED_ATTENTION=1: decode attention a block a query head
// (attention_kernel) also where launch_attention_grouped takes the heads;
// GEMLITE_GROUPED_ATTENTION=1: the grouped kernel for every head it supports (A/B).
bool decode_attention_grouped(const AttentionShape& shape) {
  const char* off = std::getenv("GEMLITE_NO_GROUPED_ATTENTION");
  if (off && std::string(off) == "1") return false;
  const char* all = std::getenv("GEMLITE_GROUPED_ATTENTION");
  if (all && std::string(all) == "1")
    return attention_grouped_supports(shape.n_heads, shape.n_kv_heads, shape.head_dim);
  return attention_runs_grouped(shape.n_heads, shape.n_kv_heads, shape.head_dim);
}
AttentionSplits decode_attention_splits(int capacity, const AttentionShape& shape, bool grouped, int sm_count) {
  const char* off = std::getenv("GEMLITE_NO_ATTENTION_SPLITS");
  if (off && std::string(off) == "1") return AttentionSplits{};
  if (const char* forced = std::getenv("GEMLITE_ATTENTION_SPLITS"))
    return attention_splits_of(capacity, std::atoi(forced));
  return grouped ? attention_grouped_splits_for(capacity, shape.n_kv_heads, sm_count)
                 : attention_splits_for(capacity, shape.n_heads, sm_count);
}

class CudaKVCache final : public KVCache {
 public:
  CudaKVCache(const std::shared_ptr<CudaContext>& ctx, int n_layers, int capacity, const AttentionShape& shape,
              DType act)
      : KVCache(capacity), n_layers(n_layers), kv_dim(shape.n_kv_heads * shape.head_dim), shape(shape),
        keys(device_tensor(ctx, act, int64_t(n_layers) * capacity, kv_dim, what(n_layers, capacity, "keys"))),
        values(device_tensor(ctx, act, int64_t(n_layers) * capacity, kv_dim, what(n_layers, capacity, "values"))),
        grouped(decode_attention_grouped(shape)),
        splits(decode_attention_splits(capacity, shape, grouped, ctx->sm_count)) {
    if (splits.count > 1) {  // decode's split partials, reused by every layer in stream order
      partials = device_tensor(ctx, DType::F32, int64_t(shape.n_heads) * splits.count, shape.head_dim + 2,
                               "the decode attention's partial sums");
      counters = device_tensor(ctx, DType::I32, 1, shape.n_heads, "the decode attention's counters");
      CUDA_CHECK(cudaMemsetAsync(counters.data, 0, size_t(shape.n_heads) * sizeof(int), ctx->stream));
      splits.partials = partials.as<float>();
      splits.counters = reinterpret_cast<unsigned*>(counters.as<int>());
    }
  }
  // The layer's slice [capacity, kv_dim] of keys or values.
  void* layer_slice(const Tensor& t, int layer) const { return t.slice_rows(int64_t(layer) * capacity(), 0).data; }

  int n_layers, kv_dim;
  AttentionShape shape;    // what the cache (and its split partials) was made for
  Tensor keys;    // [n_layers * capacity, kv_dim] act
  Tensor values;  // [n_layers * capacity, kv_dim] act
  bool grouped;            // decode attention by launch_attention_grouped
  AttentionSplits splits;  // of a decode step
  Tensor partials;         // [n_heads * splits.count, hd + 2] F32, when splits.count > 1
  Tensor counters;         // [1, n_heads] I32 (used as unsigned), when splits.count > 1

 private:
  static std::string what(int n_layers, int capacity, const char* part) {
    return std::string("the KV cache's ") + part + " (" + std::to_string(n_layers) + " layers x " +
           std::to_string(capacity) + " positions; a shorter context: -c/--ctx-size, or gemlite-bench's -d/-p/-n)";
  }
};

// A captured stream of work, instantiated once and replayed with cudaGraphLaunch.
class CudaGraph final : public CapturedOps {
 public:
  explicit CudaGraph(cudaGraphExec_t exec) : exec(exec) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec); }
  cudaGraphExec_t exec;
};

// Pinned host memory: copies from it are truly asynchronous (and capturable).
template <typename T>
struct PinnedArray {
  explicit PinnedArray(size_t n) { CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&data), n * sizeof(T), 0)); }
  ~PinnedArray() { cudaFreeHost(data); }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  T* data = nullptr;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& options)
      : ctx_(std::make_shared<CudaContext>()), act_(options.activations), graphs_(options.graphs),
        step_host_(1 + kMaxStepTokens), argmax_host_(1), top_k_host_(2 * kMaxTopK),
        prefill_attention_(ctx_, act_) {
    if (act_ != DType::F16 && act_ != DType::BF16)
      throw Error(std::string("cuda backend: activations of type ") + dtype_name(act_) + " (expected F16 or BF16)");
    step_device_ = device_tensor(ctx_, DType::I32, 1, 1 + kMaxStepTokens);  // [pos0, ids...]
    argmax_device_ = device_tensor(ctx_, DType::I32, 1, 1);
    top_k_device_ = device_tensor(ctx_, DType::I32, 1, 2 * kMaxTopK);
    CUDA_CHECK(cudaEventCreateWithFlags(&step_copied_, cudaEventDisableTiming));
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(ctx_->stream);
    cudaEventDestroy(step_copied_);
  }

  std::string name() const override { return "cuda"; }
  DType activation_type() const override { return act_; }
  int64_t device_memory_used() const override {
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return int64_t(total - free);
  }

  Tensor upload(const HostTensor& host) override {
    const auto [rows, cols] = upload_shape(host);
    Tensor t = device_tensor(ctx_, host.dtype, rows, cols, "a weight " + host.shape_string());
    CUDA_CHECK(cudaMemcpyAsync(t.data, host.data, host.nbytes(), cudaMemcpyHostToDevice, ctx_->stream));
    return t;
  }

  Tensor alloc(int64_t rows, int64_t cols) override {
    return device_tensor(ctx_, act_, rows, cols,
                         "activations [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }

  std::unique_ptr<QuantLinear> make_linear(const PackedWeight& weight) override {
    return make_cuda_linear(weight, ctx_, act_);
  }
  std::unique_ptr<QuantLinear> make_stacked_linear(const std::vector<const PackedWeight*>& weights,
                                                   StackedUse use = StackedUse::Concat) override {
    return make_stacked_cuda_linear(weights, ctx_, act_, use);
  }

  std::unique_ptr<KVCache> make_kv_cache(int n_layers, int capacity, const AttentionShape& shape) override {
    // Here, at load, rather than at the first decode step: the attention kernel's limits.
    if (!attention_supports_head_dim(shape.head_dim))
      throw Error("cuda backend: attention heads of " + std::to_string(shape.head_dim) +
                  " dimensions (the CUDA attention takes multiples of 8 up to " +
                  std::to_string(kMaxAttentionHeadDim) + "; --device cpu runs any)");
    return std::make_unique<CudaKVCache>(ctx_, n_layers, capacity, shape, act_);
  }

  void copy_to_host(const Tensor& x, float* out) override {
    if (x.dtype == DType::F32) {
      CUDA_CHECK(cudaMemcpyAsync(out, x.data, size_t(x.numel()) * 4, cudaMemcpyDeviceToHost, ctx_->stream));
    } else {
      if (f32_scratch_.numel() < x.numel()) f32_scratch_ = device_tensor(ctx_, DType::F32, 1, x.numel());
      launch_to_f32(x.data, f32_scratch_.as<float>(), x.numel(), x.dtype, ctx_->stream);
      CUDA_CHECK(cudaMemcpyAsync(out, f32_scratch_.data, size_t(x.numel()) * 4, cudaMemcpyDeviceToHost,
                                 ctx_->stream));
    }
    synchronize();
  }

  int argmax(const Tensor& x) override {
    launch_argmax(x.data, x.numel(), argmax_device_.as<int>(), x.dtype, ctx_->stream);
    CUDA_CHECK(cudaMemcpyAsync(argmax_host_.data, argmax_device_.data, sizeof(int), cudaMemcpyDeviceToHost,
                               ctx_->stream));
    synchronize();
    return *argmax_host_.data;
  }

  // Selected on the device: ids [k] then values [k] cross in one copy.
  void top_k(const Tensor& x, int k, int* ids, float* values) override {
    if (x.rows != 1 || k < 1 || k > x.numel() || k > kMaxTopK)
      throw Error("top_k: " + std::to_string(k) + " of [" + std::to_string(x.rows) + ", " + std::to_string(x.cols) +
                  "]");
    int* device_ids = top_k_device_.as<int>();
    launch_top_k(x.data, x.numel(), k, device_ids, reinterpret_cast<float*>(device_ids + k), x.dtype, ctx_->stream);
    CUDA_CHECK(cudaMemcpyAsync(top_k_host_.data, device_ids, size_t(2 * k) * 4, cudaMemcpyDeviceToHost, ctx_->stream));
    synchronize();
    std::memcpy(ids, top_k_host_.data, size_t(k) * 4);
    std::memcpy(values, top_k_host_.data + k, size_t(k) * 4);
  }
  int max_top_k() const override { return kMaxTopK; }

  // The position and the ids go to the device through pinned memory with one copy. The
  // previous step's copy must have read the pinned buffer before it is rewritten: the
  // event makes the host wait for that copy only (a prefill of several chunks queues
  // them back to back). Kernels read *pos0 (and the KV cache below it) before their PDL
  // wait (attention.cu): that is safe only because this plain copy, which no kernel
  // overlaps, is what sets the position; a kernel that moved it would have to change that.
  void set_step(const std::vector<int>& ids, int pos0) override {
    if (ids.empty() || int(ids.size()) > kMaxStepTokens)
      throw Error("cuda backend: a step of " + std::to_string(ids.size()) + " tokens (1.." +
                  std::to_string(kMaxStepTokens) + ")");
    CUDA_CHECK(cudaEventSynchronize(step_copied_));
    step_host_.data[0] = pos0;
    std::copy(ids.begin(), ids.end(), step_host_.data + 1);
    CUDA_CHECK(cudaMemcpyAsync(step_device_.data, step_host_.data, (1 + ids.size()) * sizeof(int),
                               cudaMemcpyHostToDevice, ctx_->stream));
    CUDA_CHECK(cudaEventRecord(step_copied_, ctx_->stream));
    step_tokens_ = int(ids.size());
    step_pos0_host_ = pos0;
  }
  int max_step_tokens() const override { return kMaxStepTokens; }

  void embed(const Tensor& table, Tensor& out) override {
    check_embed(table, step_host_.data + 1, step_tokens_, out);  // a graph checks the ids it was captured with
    launch_embed(table.data, table.dtype, step_ids(), step_tokens_, table.cols, out.data, out.dtype, ctx_->stream);
  }

  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    if (weight.dtype != DType::F32)
      throw Error(std::string("cuda rmsnorm: weight of type ") + dtype_name(weight.dtype) + " (expected F32)");
    launch_rmsnorm(x.data, weight.as<float>(), eps, x.rows, x.cols, out.data, x.dtype, ctx_->stream);
  }

  void add_rmsnorm(Tensor& x, const Tensor& y, const Tensor& weight, float eps, Tensor& out) override {
    if (weight.dtype != DType::F32)
      throw Error(std::string("cuda rmsnorm: weight of type ") + dtype_name(weight.dtype) + " (expected F32)");
    launch_add_rmsnorm(x.data, y.data, weight.as<float>(), eps, x.rows, x.cols, out.data, x.dtype, ctx_->stream);
  }

  // RoPE + KV store, then attention: chunks of PrefillAttention::min_tokens or more on
  // tensor cores, decode (and shorter chunks of heads the fused kernel does not take) with
  // the kernel that reads the position from device memory (graphs); at decode that kernel
  // also does the RoPE and the store.
  void attention(KVCache& kv, int layer, Tensor& qkv, const Tensor& inv_freq, const AttentionShape& shape,
                 Tensor& out) override {
    check_attention_shapes(qkv, shape, out);
    check_cache_positions(kv, step_pos0_host_, qkv.rows);  // as embed's check, at capture in a graph
    auto& cache = static_cast<CudaKVCache&>(kv);
    if (shape.n_heads != cache.shape.n_heads || shape.n_kv_heads != cache.shape.n_kv_heads ||
        shape.head_dim != cache.shape.head_dim)
      throw Error("cuda attention: " + std::to_string(shape.n_heads) + "/" + std::to_string(shape.n_kv_heads) +
                  " heads x " + std::to_string(shape.head_dim) + " over a KV cache made for " +
                  std::to_string(cache.shape.n_heads) + "/" + std::to_string(cache.shape.n_kv_heads) + " x " +
                  std::to_string(cache.shape.head_dim));
    void* keys = cache.layer_slice(cache.keys, layer);
    void* values = cache.layer_slice(cache.values, layer);
    // Decode: RoPE and the KV store inside the attention kernel, one launch fewer a layer
    // (llama2-7b tg128, H100, same day: f16 189.9 -> 191.7 tok/s, q4g64 423.4 -> 423.6).
    if (qkv.rows == 1 && cache.grouped) {
      launch_attention_grouped(keys, values, step_pos0(), qkv.data, shape.n_heads, shape.n_kv_heads,
                               shape.head_dim, cache.splits, out.data, qkv.dtype, ctx_->stream, inv_freq.as<float>());
      return;
    }
    if (qkv.rows == 1 && attention_fuses_rope(shape.head_dim)) {
      launch_attention(keys, values, step_pos0(), qkv.data, 1, shape.n_heads, shape.n_kv_heads, shape.head_dim,
                       cache.splits, out.data, qkv.dtype, ctx_->stream, inv_freq.as<float>());
      return;
    }
    launch_rope_store(keys, values, step_pos0(), inv_freq.as<float>(), qkv.data, qkv.rows, shape.n_heads,
                      shape.n_kv_heads, shape.head_dim, qkv.dtype, ctx_->stream);
    if (qkv.rows >= PrefillAttention::min_tokens(shape.head_dim) && !ctx_->capturing()) {
      prefill_attention_.run(keys, values, step_pos0_host_, qkv.data, qkv.cols, qkv.rows, shape.n_heads,
                             shape.n_kv_heads, shape.head_dim, out.data);
    } else {
      // Split over the context for decode; a short chunk has T * n_heads blocks already.
      const AttentionSplits splits = qkv.rows == 1 ? cache.splits : AttentionSplits{};
      launch_attention(keys, values, step_pos0(), qkv.data, qkv.rows, shape.n_heads, shape.n_kv_heads,
                       shape.head_dim, splits, out.data, qkv.dtype, ctx_->stream);
    }
  }

  void silu_mul(const Tensor& gate_up, Tensor& out) override {
    check_silu_mul_shapes(gate_up, out);
    launch_silu_mul(gate_up.data, out.rows, out.cols, out.data, out.dtype, ctx_->stream);
  }

  void copy_columns(const Tensor& src, Tensor& dst, int64_t col0) override {
    check_copy_columns_shapes(src, dst, col0);
    const size_t element = dtype_size(src.dtype);
    CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(dst.data) + col0 * element, dst.cols * element, src.data,
                                 src.cols * element, src.cols * element, src.rows, cudaMemcpyDeviceToDevice,
                                 ctx_->stream));
  }

  // Decode is launch-bound without this: ~350 launches a token on TinyLlama-1.1B, each
  // a few us of host time. A graph replays them in one launch (H100, same build, tg128:
  // q4g64 489 -> 593 tok/s, f16 402 -> 473).
  void run_captured(std::unique_ptr<CapturedOps>& captured, const std::function<void()>& ops) override {
    if (!graphs_) {
      ops();
      return;
    }
    if (!captured) captured = capture(ops);
    CUDA_CHECK(cudaGraphLaunch(static_cast<CudaGraph&>(*captured).exec, ctx_->stream));
  }

  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(ctx_->stream)); }

 private:
  const int* step_pos0() const { return step_device_.as<int>(); }
  const int* step_ids() const { return step_device_.as<int>() + 1; }

  std::unique_ptr<CapturedOps> capture(const std::function<void()>& ops) {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(ctx_->stream, cudaStreamCaptureModeThreadLocal));
    try {
      ops();
    } catch (...) {
      cudaStreamEndCapture(ctx_->stream, &graph);  // leaves capture mode; the partial graph is dropped
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(ctx_->stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t code = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(code);
    return std::make_unique<CudaGraph>(exec);
  }

  std::shared_ptr<CudaContext> ctx_;
  DType act_;                         // activation and KV cache type: F16 or BF16
  bool graphs_;                       // replay captured steps (else run them eagerly)
  PinnedArray<int> step_host_;        // [1 + kMaxStepTokens] pos0, then the step's ids
  Tensor step_device_;                // [1, 1 + kMaxStepTokens] I32: the same on the device
  int step_tokens_ = 0;               // T of the current step
  int step_pos0_host_ = 0;            // pos0 of the current step (eager prefill attention)
  cudaEvent_t step_copied_ = nullptr; // recorded after the last step's host -> device copy
  PinnedArray<int> argmax_host_;      // [1]
  Tensor argmax_device_;              // [1, 1] I32
  PinnedArray<int> top_k_host_;       // [2 kMaxTopK]: ids, then values (float bits)
  Tensor top_k_device_;               // [1, 2 kMaxTopK] I32, the same
  Tensor f32_scratch_;                // [1, n] F32 for copy_to_host, grown on demand
  PrefillAttention prefill_attention_;
};

}  // namespace

std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(code);
  if (count == 0) return "no CUDA device found";
  return "";
}

void require_cuda_device() {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw Error("--device cuda: " + why + "; use --device cpu");
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  require_cuda_device();
  BackendOptions chosen = options;
  if (const char* no_graph = std::getenv("GEMLITE_NO_GRAPH"); no_graph && std::string(no_graph) == "1")
    chosen.graphs = false;
  return std::make_unique<CudaBackend>(chosen);
}

}  // namespace gemlite
