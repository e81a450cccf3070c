#include "runtime/cuda/prefill_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/pdl.cuh"
#include "runtime/cuda/flash_prefill.cuh"
#include "runtime/cuda/act_type.cuh"
#include "runtime/error.h"

namespace gemlite {
namespace {

constexpr int kSoftmaxThreads = 256;  // a warp a row

// A warp per row of S [rows, n_pos] (row r: query token t = r % tile of its head, global
// position pos0 + t0 + t): P = softmax over positions [0, pos0 + t0 + t], zero past them
// (the causal mask; P·v runs over all n_pos columns). fp32 like the CPU. Two passes over
// the row: a running max and sum (the sum rescaled as the max grows), then the writes; the
// second reads what the first left in L1. A block a row with three passes and two block
// reductions took 44.6 us per layer of a 512-token Llama-2-7B chunk (H200, ncu).
// PRECOND: blockDim.x = kSoftmaxThreads, grid.x = ceil(rows / (kSoftmaxThreads / 32)).
template <typename Act>
__global__ void causal_softmax_kernel(const float* __restrict__ scores, Act* __restrict__ probs, int64_t n_rows,
                                      int tile, int n_pos, int first_position) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * (kSoftmaxThreads / 32) + threadIdx.x / 32;
  if (row >= n_rows) return;
  const int n_valid = first_position + int(row % tile) + 1;
  const float* s = scores + row * n_pos;  // [n_pos]
  Act* p = probs + row * n_pos;           // [n_pos]
  float max_score = -INFINITY, sum = 0.0f;
  for (int i = lane; i < n_valid; i += 32) {
    const float v = s[i];
    if (v > max_score) {
      sum = sum * expf(max_score - v) + 1.0f;
      max_score = v;
    } else {
      sum += expf(v - max_score);
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_max = __shfl_xor_sync(0xffffffffu, max_score, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, sum, offset);
    const float m = fmaxf(max_score, other_max);
    // A lane with no position yet (max -inf) adds nothing: exp(-inf) = 0, and m stays finite.
    sum = (max_score == -INFINITY ? 0.0f : sum * expf(max_score - m)) +
          (other_max == -INFINITY ? 0.0f : other_sum * expf(other_max - m));
    max_score = m;
  }
  const float inv_sum = 1.0f / sum;
  for (int i = lane; i < n_pos; i += 32) p[i] = from_float<Act>(i < n_valid ? expf(s[i] - max_score) * inv_sum : 0.0f);
}

}  // namespace

PrefillAttention::PrefillAttention(std::shared_ptr<CudaContext> ctx, DType act, size_t max_scratch_bytes)
    : ctx_(std::move(ctx)), act_(act), max_scratch_bytes_(max_scratch_bytes) {}

void PrefillAttention::run(const void* key_cache, const void* value_cache, int pos0, const void* qkv,
                           int64_t qkv_stride, int64_t T, int n_heads, int n_kv_heads, int head_dim, void* out) {
  if (T < 1 || n_kv_heads < 1 || n_heads % n_kv_heads != 0)
    throw Error("cuda prefill attention: " + std::to_string(T) + " tokens, " + std::to_string(n_heads) + " heads / " +
                std::to_string(n_kv_heads) + " kv heads");
  const int group = n_heads / n_kv_heads, kv_dim = n_kv_heads * head_dim, out_stride = n_heads * head_dim;
  const size_t act_bytes = dtype_size(act_);
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (fused(head_dim) && qkv_stride % 8 == 0 && aligned(qkv) && aligned(key_cache) &&
      aligned(value_cache) && aligned(out)) {
    run_fused(key_cache, value_cache, pos0, qkv, qkv_stride, T, n_heads, n_kv_heads, head_dim, out);
    return;
  }
  // A query row of every head needs n_pos scores and probabilities; the last tile sees
  // the longest context, so every tile fits the scratch sized for it.
  const int64_t max_positions = pos0 + T;
  const size_t row_bytes = size_t(n_heads) * size_t(max_positions) * (sizeof(float) + act_bytes);
  int64_t tile = std::max<int64_t>(1, std::min<int64_t>(T, int64_t(max_scratch_bytes_ / row_bytes)));
  if (tile < T && tile >= 16) tile -= tile % 16;  // whole 16-row MMA tiles of the GEMMs
  // S [n_heads, rows, n_pos] F32, then P [n_heads, rows, n_pos] act
  void* scratch = ctx_->scratch(size_t(tile) * row_bytes, "the prefill attention's scores");

  const float scale = 1.0f / std::sqrt(float(head_dim)), one = 1.0f, zero = 0.0f;
  const cudaDataType_t type = cublas_type(act_);
  const auto* keys = static_cast<const uint8_t*>(key_cache);
  const auto* values = static_cast<const uint8_t*>(value_cache);
  for (int64_t t0 = 0; t0 < T; t0 += tile) {
    const int rows = int(std::min(tile, T - t0));
    const int n_pos = int(pos0 + t0 + rows);  // positions the tile's last token sees
    const int64_t head_block = int64_t(rows) * n_pos;  // one head's [rows, n_pos]
    float* scores = static_cast<float*>(scratch);                                // [n_heads, rows, n_pos]
    uint8_t* probs = reinterpret_cast<uint8_t*>(scores + n_heads * head_block);  // [n_heads, rows, n_pos] act
    const auto* queries = static_cast<const uint8_t*>(qkv) + size_t(t0 * qkv_stride) * act_bytes;
    auto* outputs = static_cast<uint8_t*>(out) + size_t(t0 * out_stride) * act_bytes;
    // Heads are stored in S and P as [g][kv] (query head kv * group + g): one strided
    // batch over the kv heads per g, each batch entry reading its own kv head's keys.
    // Column-major, as cuBLAS sees it: Sᵀ [n_pos, rows] = K [n_pos, hd] · Qᵀ [hd, rows].
    for (int g = 0; g < group; ++g) {
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          ctx_->cublas, CUBLAS_OP_T, CUBLAS_OP_N, n_pos, rows, head_dim, &scale, keys, type, kv_dim, head_dim,
          queries + size_t(g) * head_dim * act_bytes, type, int(qkv_stride), int64_t(group) * head_dim, &zero,
          scores + g * n_kv_heads * head_block, CUDA_R_32F, n_pos, head_block, n_kv_heads, CUBLAS_COMPUTE_32F,
          CUBLAS_GEMM_DEFAULT));
    }
    dispatch_act(act_, "prefill attention", [&](auto tag) {
      using Act = decltype(tag);
      const int64_t n_rows = int64_t(n_heads) * rows;
      constexpr int kRowsABlock = kSoftmaxThreads / 32;
      causal_softmax_kernel<Act><<<unsigned((n_rows + kRowsABlock - 1) / kRowsABlock), kSoftmaxThreads, 0,
                                   ctx_->stream>>>(scores, reinterpret_cast<Act*>(probs), n_rows, rows, n_pos,
                                                   int(pos0 + t0));
      CHECK_LAST_LAUNCH("causal_softmax_kernel");
    });
    // Oᵀ [hd, rows] = Vᵀ [hd, n_pos] · Pᵀ [n_pos, rows], written into out's head columns.
    for (int g = 0; g < group; ++g) {
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          ctx_->cublas, CUBLAS_OP_N, CUBLAS_OP_N, head_dim, rows, n_pos, &one, values, type, kv_dim, head_dim,
          probs + size_t(g * n_kv_heads * head_block) * act_bytes, type, n_pos, head_block, &zero,
          outputs + size_t(g) * head_dim * act_bytes, type, out_stride, int64_t(group) * head_dim, n_kv_heads,
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }
}

void PrefillAttention::run_fused(const void* key_cache, const void* value_cache, int pos0, const void* qkv,
                                 int64_t qkv_stride, int64_t T, int n_heads, int n_kv_heads, int head_dim, void* out) {
  const int group = n_heads / n_kv_heads, kv_dim = n_kv_heads * head_dim, out_stride = n_heads * head_dim;
  const FlashPrefillLaunch layout = flash_prefill_launch(T, pos0, n_heads, n_kv_heads, ctx_->sm_count);
  const int splits = layout.splits, tiles_per_split = layout.tiles_per_split;
  // [splits][T][n_heads][head_dim + 2] fp32 when split
  float* partials = splits > 1 ? static_cast<float*>(ctx_->scratch(
                                     size_t(splits) * size_t(T) * n_heads * (head_dim + 2) * sizeof(float),
                                     "the prefill attention's split partials"))
                               : nullptr;
  constexpr float kLog2e = 1.4426950408889634f;  // the kernel's softmax runs in exp2
  const float scale_log2 = kLog2e / std::sqrt(float(head_dim));
  const dim3 grid{unsigned(layout.query_tiles), unsigned(n_heads / layout.heads_a_tile), unsigned(splits)};
  dispatch_act(act_, "prefill attention", [&](auto tag) {
    using Act = decltype(tag);
    const auto launch = [&](auto flash) {
      flash.kernel<<<grid, kFlashThreads, flash.smem_bytes, ctx_->stream>>>(
          static_cast<const Act*>(qkv), qkv_stride, static_cast<const Act*>(key_cache),
          static_cast<const Act*>(value_cache), kv_dim, group, layout.heads_a_tile, pos0, int(T), scale_log2,
          tiles_per_split, static_cast<Act*>(out), out_stride, partials);
      CHECK_LAST_LAUNCH("flash_prefill_kernel");
    };
    if (head_dim == 64) {
      launch(kernel_with_smem<flash_prefill_kernel<Act, 64>, FlashLayout<64>::kSmemBytes>());
    } else {
      launch(kernel_with_smem<flash_prefill_kernel<Act, 128>, FlashLayout<128>::kSmemBytes>());
    }
    if (splits > 1) {
      flash_merge_kernel<Act><<<dim3(unsigned(T), unsigned(n_heads)), unsigned(head_dim), 0, ctx_->stream>>>(
          partials, splits, int(T), static_cast<Act*>(out), out_stride);
      CHECK_LAST_LAUNCH("flash_merge_kernel");
    }
  });
}

}  // namespace gemlite
