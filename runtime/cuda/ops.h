#pragma once
// Launchers of the CUDA backend's kernels (ops.cu, attention.cu, argmax.cu, top_k.cu,
// gemv_dense.cu).
// Pointers are device memory, rows contiguous; `act` is the activation type of x/y
// pointers (F16 or BF16). Every launcher is asynchronous on `stream` and checks its
// launch; none synchronizes, and none reads a per-step value (token ids, position) from
// the host: those are device pointers, so a captured launch replays for every token.
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/attention_launch.h"
#include "runtime/dtype.h"

namespace gemlite {

// out [T, dim] (act) = table [vocab, dim] (F32/F16/BF16) rows ids [T] (device, checked
// against vocab by the caller).
void launch_embed(const void* table, DType table_dtype, const int* ids, int T, int64_t dim,
                  void* out, DType act, cudaStream_t stream);

// out [T, d] = x [T, d] / rms(x) * weight [d] (F32); fp32 math, one block per row.
// Error for d > kMaxNormDim.
constexpr int64_t kMaxNormDim = 32768;
void launch_rmsnorm(const void* x, const float* weight, float eps, int64_t T, int64_t d,
                    void* out, DType act, cudaStream_t stream);

// x [T, d] += y [T, d], then out [T, d] = rmsnorm(x) (out may be y); fp32 math.
void launch_add_rmsnorm(void* x, const void* y, const float* weight, float eps, int64_t T, int64_t d, void* out,
                        DType act, cudaStream_t stream);

// out [T, h] = silu(gate_up[:, :h]) * gate_up[:, h:], gate_up [T, 2h]
void launch_silu_mul(const void* gate_up, int64_t T, int64_t h, void* out, DType act, cudaStream_t stream);
// y [M, N] += bias [N] (F32)
void launch_add_bias(void* y, const float* bias, int64_t M, int64_t N, DType act, cudaStream_t stream);
// out [n] (F32) = x [n] (act)
void launch_to_f32(const void* x, float* out, int64_t n, DType act, cudaStream_t stream);

// *index = the index of the largest element of x [n] (act), the lowest among equal ones
// (NaNs are skipped). One block.
void launch_argmax(const void* x, int64_t n, int* index, DType act, cudaStream_t stream);

// ids [k], values [k] (F32) = the k largest elements of x [n] (act) and their indices, in
// the Sampler's order (larger first, equal ones by lower index, NaN last); one block
// (top_k.cu). Error unless 1 <= k <= min(n, kMaxTopK).
constexpr int kMaxTopK = 256;
void launch_top_k(const void* x, int64_t n, int k, int* ids, float* values, DType act, cudaStream_t stream);

// qkv [T, (n_heads + 2 n_kv) hd] (act) holds each token's q, k, v side by side. Rotates
// q (in place) and k by RoPE (pairs (i, i + hd/2), angle float(*pos0 + t) * inv_freq[i],
// inv_freq [hd/2] F32) and stores the rotated k and v at positions *pos0.. of the layer's
// slices of key_cache / value_cache [capacity, n_kv*hd] (act). pos0 [1] is device memory;
// the grid depends on T and the shape only, not on the position (graph replays).
void launch_rope_store(void* key_cache, void* value_cache, const int* pos0, const float* inv_freq, void* qkv,
                       int64_t T, int n_heads, int n_kv_heads, int head_dim, DType act, cudaStream_t stream);

// Causal attention of the (rotated) q in qkv over positions [0, *pos0 + t] of the caches
// -> out [T, n_heads*hd]: one block per (head, token, split). For decode and chunks
// shorter than PrefillAttention::min_tokens (prefill_attention.h), which runs the others
// on tensor cores.
// Precondition (checked, Error): head_dim a multiple of 8 up to kMaxAttentionHeadDim,
// n_heads % n_kv_heads == 0; splits.count > 1 only with T == 1. kAttentionThreads a block
// (attention_launch.h).
constexpr int kMaxAttentionHeadDim = 256;
//
// rope_inv_freq set (decode: T = 1, head_dim % 16 == 0, see attention_fuses_rope): q and
// this token's k in qkv are not rotated yet and its k, v not stored; the kernel does both
// (launch_rope_store's work) and takes them from registers: one launch fewer per layer.
void launch_attention(void* key_cache, void* value_cache, const int* pos0, const void* qkv, int64_t T,
                      int n_heads, int n_kv_heads, int head_dim, const AttentionSplits& splits, void* out, DType act,
                      cudaStream_t stream, const float* rope_inv_freq = nullptr);
inline bool attention_fuses_rope(int head_dim) { return head_dim % 16 == 0; }
// The same decode step (T = 1, RoPE and the KV store inside) with the query heads of one kv
// head in one block, on tensor cores (attention_grouped.cu), for heads that
// attention_grouped_supports (Error otherwise); `splits` from attention_grouped_splits_for
// (or attention_splits_of), its partials and counters sized as for launch_attention.
void launch_attention_grouped(void* key_cache, void* value_cache, const int* pos0, const void* qkv, int n_heads,
                              int n_kv_heads, int head_dim, const AttentionSplits& splits, void* out, DType act,
                              cudaStream_t stream, const float* rope_inv_freq);
// The heads launch_attention takes (the backend checks a model's at load).
inline bool attention_supports_head_dim(int head_dim) {
  return head_dim >= 8 && head_dim % 8 == 0 && head_dim <= kMaxAttentionHeadDim;
}

// y [M, N] (act) = x [M, K] (act) · Wᵀ (+ bias [N] F32 or null), W [N, K] (act), M = 1..8
// (Error otherwise): the dense formats' decode path (gemv_dense.cu).
// The RMSNorm fused into gemv_dense, as into gemv_qn (QnPendingNorm, gemv_qn_residual in
// kernels/qn/gemv_qn.h): pending_sum_squares [M, pending_parts] set: y scaled by
// rsqrt(Σ / K + eps) before the bias; residual [M, N] set: residual += y, y = residual ∘
// norm_weight [N], sum_squares [M, gemv_dense_blocks(N)] Σ residual² per block.
struct DenseGemvNorm {
  const float* pending_sum_squares = nullptr;
  int pending_parts = 0;
  float eps = 0;
  void* residual = nullptr;
  const float* norm_weight = nullptr;
  float* sum_squares = nullptr;
};
int64_t gemv_dense_blocks(int64_t N);
void launch_gemv_dense(const void* W, const void* x, const float* bias, void* y, int M, int64_t N, int64_t K,
                       DType act, cudaStream_t stream, const DenseGemvNorm& norm = {});

}  // namespace gemlite
