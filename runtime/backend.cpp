#include "runtime/backend.h"

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/sampler.h"
#ifdef GEMLITE_WITH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace gemlite {

namespace {
std::string shape_of(const Tensor& t) {
  return "[" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "] " + dtype_name(t.dtype);
}
}  // namespace

void Backend::top_k(const Tensor& x, int k, int* ids, float* values) {
  const int64_t n = x.numel();
  if (x.rows != 1 || k < 1 || k > n || k > max_top_k())
    throw Error("top_k: " + std::to_string(k) + " of " + shape_of(x));
  std::vector<float> all(static_cast<size_t>(n));
  copy_to_host(x, all.data());
  std::vector<TokenCandidate> candidates(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) candidates[size_t(i)] = {int(i), all[size_t(i)]};
  std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(), more_likely);
  for (int i = 0; i < k; ++i) {
    ids[i] = candidates[size_t(i)].id;
    values[i] = candidates[size_t(i)].logit;
  }
}

void check_attention_shapes(const Tensor& qkv, const AttentionShape& shape, const Tensor& out) {
  const int64_t q_dim = int64_t(shape.n_heads) * shape.head_dim;
  if (qkv.cols != q_dim + 2 * int64_t(shape.n_kv_heads) * shape.head_dim || out.rows != qkv.rows ||
      out.cols != q_dim || out.dtype != qkv.dtype)
    throw Error("attention: qkv " + shape_of(qkv) + " and out " + shape_of(out) + " for " +
                std::to_string(shape.n_heads) + " heads / " + std::to_string(shape.n_kv_heads) + " kv heads x " +
                std::to_string(shape.head_dim));
}

void check_silu_mul_shapes(const Tensor& gate_up, const Tensor& out) {
  if (gate_up.cols != 2 * out.cols || gate_up.rows != out.rows || gate_up.dtype != out.dtype)
    throw Error("silu_mul: gate_up " + shape_of(gate_up) + " and out " + shape_of(out) +
                " (expected [T, 2h] and [T, h])");
}

std::pair<int64_t, int64_t> upload_shape(const HostTensor& host) {
  if (host.shape.size() > 2) throw Error("upload: a tensor " + host.shape_string() + " (expected 1 or 2 dimensions)");
  return {host.shape.size() == 2 ? host.shape[0] : 1, host.shape.empty() ? 1 : host.shape.back()};
}

void check_embed(const Tensor& table, const int* ids, int64_t n, const Tensor& out) {
  if (out.rows != n || out.cols != table.cols)
    throw Error("embed: " + std::to_string(n) + " ids into out " + shape_of(out) + " from a table " + shape_of(table));
  for (int64_t t = 0; t < n; ++t)
    if (ids[t] < 0 || ids[t] >= table.rows)
      throw Error("embed: token id " + std::to_string(ids[t]) + " outside the table's " + std::to_string(table.rows) +
                  " rows");
}

void check_cache_positions(const KVCache& cache, int pos0, int64_t T) {
  if (pos0 < 0 || int64_t(pos0) + T > cache.capacity())
    throw Error("attention: positions " + std::to_string(pos0) + ".." + std::to_string(int64_t(pos0) + T - 1) +
                " outside a KV cache of " + std::to_string(cache.capacity()));
}

void check_copy_columns_shapes(const Tensor& src, const Tensor& dst, int64_t col0) {
  if (col0 < 0 || col0 + src.cols > dst.cols || src.rows != dst.rows || src.dtype != dst.dtype)
    throw Error("copy_columns: src " + shape_of(src) + " into dst " + shape_of(dst) + " at column " +
                std::to_string(col0));
}

void check_backend(const std::string& name) {
  if (name == "cpu") return;
#ifdef GEMLITE_WITH_CUDA
  if (name == "cuda") return require_cuda_device();
#else
  if (name == "cuda")
    throw Error("--device cuda: this build has no CUDA (configure with nvcc, -DGEMLITE_CUDA=ON); use --device cpu");
#endif
  throw Error("--device '" + name + "': unknown backend (expected cpu or cuda)");
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options) {
  check_backend(name);
#ifdef GEMLITE_WITH_CUDA
  if (name == "cuda") return make_cuda_backend(options);
#else
  (void)options;
#endif
  return make_cpu_backend();
}

std::string default_backend_name() {
#ifdef GEMLITE_WITH_CUDA
  if (cuda_unavailable_reason().empty()) return "cuda";
#endif
  return "cpu";
}

DType parse_activation_type(const std::string& name) {
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  throw Error("--dtype '" + name + "': expected f16 or bf16");
}

}  // namespace gemlite
