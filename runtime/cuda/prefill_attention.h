#pragma once
// Causal grouped-query attention of a prompt chunk on tensor cores. Heads of 64 or 128
// dimensions: one fused kernel (flash_prefill.cuh: scores in registers, an online
// softmax; scratch only for the partials of a split over the keys). Others: for each
// query tile, S = q·kᵀ·scale (cuBLAS, fp32) -> causal softmax -> P (act) -> out = P·v
// (cuBLAS).
// Both read each key and value once per query tile, where the one-block-per-(head,
// token) kernel of launch_attention re-reads a token's whole context per head: at
// Llama-2-7B pp512 that kernel took 1.29 ms a layer, 46 % of a prefill (ncu, H100).
#include <cstdint>
#include <memory>

#include "runtime/cuda/cuda_context.h"
#include "runtime/dtype.h"

namespace gemlite {

class PrefillAttention {
 public:
  // Whether heads of head_dim dimensions take the fused kernel (flash_prefill.cuh).
  static bool fused(int head_dim) { return head_dim == 64 || head_dim == 128; }
  // Chunks of at least this many tokens take PrefillAttention; fewer (decode) take the
  // attention kernel, which needs no host position and replays in a graph, but runs a
  // block a head and token, each re-reading its context: at a 16-token chunk after 4096
  // positions, 32 heads of 128 read ~1 GB a layer. The fused kernel from 2 tokens on
  // (llama2-7b q4g64 after 4096 positions, H100, tok/s: pp16 1307 -> 3095, pp8 1143 ->
  // 1971), the GEMMs (a launch each per kv head and query tile) from 32.
  static int min_tokens(int head_dim) { return fused(head_dim) ? 2 : 32; }

  // The GEMM path's S (fp32) and P (act) of one query tile live in the context's scratch,
  // at most max_scratch_bytes of it: query tiles shrink as the context grows (at least one
  // token a tile).
  static constexpr size_t kDefaultMaxScratchBytes = size_t(64) << 20;
  PrefillAttention(std::shared_ptr<CudaContext> ctx, DType act, size_t max_scratch_bytes = kDefaultMaxScratchBytes);

  // q in qkv [T, qkv_stride] (act; head h at column h*hd, already rotated), the layer's
  // key_cache / value_cache [capacity, n_kv*hd] (act) holding positions [0, pos0 + T):
  // out [T, n_heads*hd] (act), token t attending to positions [0, pos0 + t]. pos0 is a
  // host value: this runs eagerly, never inside a captured graph.
  // On ctx's stream.
  void run(const void* key_cache, const void* value_cache, int pos0, const void* qkv, int64_t qkv_stride, int64_t T,
           int n_heads, int n_kv_heads, int head_dim, void* out);

 private:
  // The fused kernel, for fused(head_dim) and 16-byte aligned rows.
  void run_fused(const void* key_cache, const void* value_cache, int pos0, const void* qkv, int64_t qkv_stride,
                 int64_t T, int n_heads, int n_kv_heads, int head_dim, void* out);

  std::shared_ptr<CudaContext> ctx_;
  DType act_;
  size_t max_scratch_bytes_;
};

}  // namespace gemlite
