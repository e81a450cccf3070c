#include "runtime/cuda/cuda_backend.h"

#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_linear.h"
#include "runtime/cuda/ops.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

class CudaKVCache final : public KVCache {
 public:
  CudaKVCache(const std::shared_ptr<CudaContext>& ctx, int n_layers, int capacity, int kv_dim, DType act)
      : KVCache(capacity), n_layers(n_layers), kv_dim(kv_dim),
        keys(device_tensor(ctx, act, int64_t(n_layers) * capacity, kv_dim)),
        values(device_tensor(ctx, act, int64_t(n_layers) * capacity, kv_dim)) {}
  // The layer's slice [capacity, kv_dim] of keys or values.
  void* layer_slice(const Tensor& t, int layer) const { return t.slice_rows(int64_t(layer) * capacity(), 0).data; }

  int n_layers, kv_dim;
  Tensor keys;    // [n_layers * capacity, kv_dim] act
  Tensor values;  // [n_layers * capacity, kv_dim] act
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() : ctx_(std::make_shared<CudaContext>()) {}
  ~CudaBackend() override { cudaStreamSynchronize(ctx_->stream); }

  std::string name() const override { return "cuda"; }

  Tensor upload(const HostTensor& host) override {
    const int64_t rows = host.shape.size() == 2 ? host.shape[0] : 1;
    const int64_t cols = host.shape.empty() ? 1 : host.shape.back();
    Tensor t = device_tensor(ctx_, host.dtype, rows, cols);
    CUDA_CHECK(cudaMemcpyAsync(t.data, host.data, host.nbytes(), cudaMemcpyHostToDevice, ctx_->stream));
    return t;
  }

  Tensor alloc(int64_t rows, int64_t cols) override { return device_tensor(ctx_, act_, rows, cols); }

  std::unique_ptr<QuantLinear> make_linear(const PackedWeight& weight) override {
    return make_cuda_linear(weight, ctx_, act_);
  }

  std::unique_ptr<KVCache> make_kv_cache(int n_layers, int capacity, int kv_dim) override {
    return std::make_unique<CudaKVCache>(ctx_, n_layers, capacity, kv_dim, act_);
  }

  void copy_to_host(const Tensor& x, float* out) override {
    Tensor f32 = device_tensor(ctx_, DType::F32, x.rows, x.cols);  // [M, N]
    launch_to_f32(x.data, f32.as<float>(), x.numel(), x.dtype, ctx_->stream);
    CUDA_CHECK(cudaMemcpyAsync(out, f32.data, size_t(x.numel()) * sizeof(float), cudaMemcpyDeviceToHost,
                               ctx_->stream));
    synchronize();
  }

  void embed(const Tensor& table, const std::vector<int>& ids, Tensor& out) override {
    for (int id : ids)
      if (id < 0 || id >= table.rows)
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                    std::to_string(table.rows));
    Tensor device_ids = device_tensor(ctx_, DType::I32, 1, int64_t(ids.size()));  // [T]
    CUDA_CHECK(cudaMemcpyAsync(device_ids.data, ids.data(), ids.size() * sizeof(int), cudaMemcpyHostToDevice,
                               ctx_->stream));
    launch_embed(table.data, table.dtype, device_ids.as<int>(), int(ids.size()), table.cols, out.data, out.dtype,
                 ctx_->stream);
  }

  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    if (weight.dtype != DType::F32)
      throw Error(std::string("cuda rmsnorm: weight of type ") + dtype_name(weight.dtype) + " (expected F32)");
    launch_rmsnorm(x.data, weight.as<float>(), eps, x.rows, x.cols, out.data, x.dtype, ctx_->stream);
  }

  void rope(Tensor& q, Tensor& k, const AttentionShape& shape, int pos0,
            const std::vector<float>& inv_freq) override {
    // inv_freq is the model's constant: uploaded on first use, again only if it changes.
    if (inv_freq != inv_freq_host_) {
      inv_freq_ = device_tensor(ctx_, DType::F32, 1, int64_t(inv_freq.size()));  // [hd/2]
      CUDA_CHECK(cudaMemcpyAsync(inv_freq_.data, inv_freq.data(), inv_freq.size() * sizeof(float),
                                 cudaMemcpyHostToDevice, ctx_->stream));
      inv_freq_host_ = inv_freq;
    }
    launch_rope(q.data, k.data, q.rows, shape.n_heads, shape.n_kv_heads, shape.head_dim, pos0,
                inv_freq_.as<float>(), q.dtype, ctx_->stream);
  }

  void attention(KVCache& kv, int layer, int pos0, const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionShape& shape, Tensor& out) override {
    auto& cache = static_cast<CudaKVCache&>(kv);
    launch_attention(cache.layer_slice(cache.keys, layer), cache.layer_slice(cache.values, layer), pos0, q.data,
                     k.data, v.data, q.rows, shape.n_heads, shape.n_kv_heads, shape.head_dim, out.data, q.dtype,
                     ctx_->stream);
  }

  void silu_mul(Tensor& gate, const Tensor& up) override {
    launch_silu_mul(gate.data, up.data, gate.numel(), gate.dtype, ctx_->stream);
  }

  void add(Tensor& x, const Tensor& y) override { launch_add(x.data, y.data, x.numel(), x.dtype, ctx_->stream); }

  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(ctx_->stream)); }

 private:
  std::shared_ptr<CudaContext> ctx_;
  DType act_ = DType::F16;             // activation type; BF16 is the planned second
  Tensor inv_freq_;                    // [hd/2] F32 on the device
  std::vector<float> inv_freq_host_;   // what inv_freq_ holds
};

}  // namespace

std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(code);
  if (count == 0) return "no CUDA device found";
  return "";
}

std::unique_ptr<Backend> make_cuda_backend() {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw Error("--device cuda: " + why + "; use --device cpu");
  return std::make_unique<CudaBackend>();
}

}  // namespace gemlite
