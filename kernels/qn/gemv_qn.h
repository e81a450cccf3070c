#pragma once
// Fused dequantize + GEMV for qN / qNgG weights on the GPU (decode at batch 1..8, and
// short prompts in slices of up to 16 rows):
//   y [M, N] = x [M, K] · Wᵀ (+ bias),  W [N, K] stored as in kernels/qn/qn_format.h,
// x and y fp16 or bf16, fp32 accumulation (tensor-core mma), M = 1..16, any K and N.
// The launch is asynchronous on the caller's stream and never synchronizes, so it can be
// captured into a CUDA graph.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/packed_weight.h"
#include "runtime/dtype.h"

namespace gemlite {

// The decode GEMVs' rows (the n = 8 of an m16n8k16 mma with the weights as A). QuantLinear
// sends qN with M <= kGemvQnMaxRows here, longer prompt chunks to gemm_qn on an H100 (up
// to gemm_qn_max_m rows, kernels/qn/gemm_qn.h), elsewhere up to gemv_sliced_max_m() rows here in slices of
// kGemvQnMaxRows (runtime/cuda/cuda_linear.cu: what that beats is the dense copy + cuBLAS,
// not cuBLAS on a dense weight), and larger M to a dense fp16 copy + cuBLAS.
// Measured rule (H100,
// fp16, cold L2, 2026-11-22, gemv_qn vs cuBLAS fp16 GEMM at the same M, shapes 4096^2,
// 8192^2, 8192 x 57344, formats q8 q6g64 q4g64 q3g64 q2g64): gemv_qn is faster at every
// M = 1, 2, 4, 8 and every bit width; its lead shrinks with M and is smallest at 8-6 bits
// on the small shape: M = 8, 4096^2: q8 1.28x, q6g64 1.17x, q4g64 1.39x, q3g64 1.47x,
// q2g64 1.69x (8192^2: 1.50-2.12x; 8192 x 57344: 1.76-2.68x). So the crossover lies above
// 8 for every bit width and one launch takes as many rows as the kernel can.
constexpr int kGemvMaxM = 8;
// The most rows of x one gemv_qn launch takes: above kGemvMaxM a second kernel puts the
// activations in the mma's A (16 rows) and the weights in B, the same dequantization for
// twice the rows (gemv_qn_kernel.cuh, compute_chunk).
constexpr int kGemvQnMaxRows = 16;

// A qN weight in device memory, prepared for one activation type. Owns its buffers
// (free with free_qn_weight).
struct QnDeviceWeight {
  // [N16 / 16, Kw / 32, 512] packed codes of the checkpoint, each tile (16 block rows x 32
  // words) contiguous: word kw of stored row n at qn_tile_word_index (rows N .. N16 - 1 zero).
  const uint32_t* qweight = nullptr;
  // [n_groups, N16 / 16, 8, 2] (N16 = qn_padded_rows(N)) pairs {scale, -zero * scale}
  // rounded once to the activation type (fp16 or bf16 bits, scale in the low half): the
  // kernel dequantizes w = q * scale + that with one fma per pair of weights, and reads
  // the same 4 bytes per group and row as the checkpoint's scales + zeros. Pair (g, stored
  // row n) is at qn_scale_bias_index(g, qn_block_row(n, paired_half), N16): block rows v
  // and v + 8 of a 16-row block side by side, one 8-byte load per lane (upload_qn_weight).
  const uint32_t* scale_bias = nullptr;
  const float* bias = nullptr;  // [N] or null
  DType act = DType::F16;       // F16 or BF16: the x / y type this weight was prepared for
  int bits = 0;                 // 1..8: code stride in a word (s7: 8)
  bool sparse = false;          // s7: codes are 1:2 pair bytes (kernels/s7/s7_format.h)
  int group = 0;                // 0 = per output channel
  int64_t N = 0, K = 0;
  int64_t Kw = 0;               // words per row
  int64_t n_groups = 0;
  int group_shift = 0;          // group of k = min((k / 32) >> group_shift, n_groups - 1)
  // > 0: a SwiGLU stack [gate; up] of N = 2 * paired_half rows (paired_half % 8 == 0). Kernel
  // block b then takes gate rows [8b, 8b + 8) and the up rows paired_half + [8b, 8b + 8) (its
  // block rows 16b .. 16b + 15, see qn_block_row), so gemv_qn_swiglu can finish
  // silu(gate) * up in its epilogue. y and bias keep the stacked row order; qweight and
  // scale_bias are in block-row order (stored row n at block row qn_block_row(n, paired_half)).
  int64_t paired_half = 0;

  size_t weight_bytes() const;  // qweight + scale_bias (+ bias): what one GEMV reads of W
};

// N rounded up to the 16 rows of a kernel block: the rows of scale_bias.
inline int64_t qn_padded_rows(int64_t N) { return (N + 15) / 16 * 16; }

#ifdef __CUDACC__
#define GEMLITE_HOST_DEVICE __host__ __device__
#else
#define GEMLITE_HOST_DEVICE
#endif
// Where stored row n sits among the kernel's block rows (block b = rows 16b .. 16b + 15):
// n itself, or for a SwiGLU pair (paired_half > 0) gate row n < paired_half at
// 16 (n / 8) + n % 8 and up row paired_half + i at 16 (i / 8) + 8 + i % 8.
GEMLITE_HOST_DEVICE inline int64_t qn_block_row(int64_t n, int64_t paired_half) {
  if (paired_half <= 0) return n;
  const int64_t i = n < paired_half ? n : n - paired_half;
  return i / 8 * 16 + (n < paired_half ? 0 : 8) + i % 8;
}
// The stored row at block row v: the inverse of qn_block_row.
GEMLITE_HOST_DEVICE inline int64_t qn_stored_row(int64_t v, int64_t paired_half) {
  if (paired_half <= 0) return v;
  const int64_t i = v / 16 * 8 + v % 8;
  return v % 16 < 8 ? i : paired_half + i;
}
// Word kw of block row v in the device's qweight (QnDeviceWeight::qweight): tiles of 16 block
// rows x 32 words, each 2 KB contiguous, tiles_per_row = Kw / 32 of them per row block. With
// w = kw % 32, part (c, h) = (w % 8 / 4, v % 16 / 8) of a tile is 512 contiguous bytes of
// which lane 4 (v % 8) + w / 8 of a warp loads the 16 bytes of words 8 (w / 8) + 4c + 0..3:
// one load instruction reads 512 bytes in a row (gemv_qn_kernel.cuh says why a lane takes those
// words). The checkpoint's [N, Kw] rows put such 16-byte pieces 8 row strides apart.
GEMLITE_HOST_DEVICE inline int64_t qn_tile_word_index(int64_t v, int64_t kw, int64_t tiles_per_row) {
  const int64_t tile = v / 16 * tiles_per_row + kw / 32, w = kw % 32, part = w % 8 / 4 * 2 + v % 16 / 8;
  return tile * 512 + part * 128 + (v % 8 * 4 + w / 8) * 4 + w % 4;
}
// Pair (g, block row v) of scale_bias: rows v and v + 8 of a block side by side.
GEMLITE_HOST_DEVICE inline int64_t qn_scale_bias_index(int64_t g, int64_t v, int64_t N16) {
  return g * N16 + v / 16 * 16 + v % 8 * 2 + v % 16 / 8;
}

// Uploads a qN / qNgG weight (synchronously; not for use inside a graph capture).
// Throws Error for other formats, for act other than F16/BF16, and for a group that is
// not 32 * 2^i or per-channel, or whose scales need more shared memory than the GPU offers a
// block (gemv_qn_scale_slab_bytes). paired_half > 0 lays out a SwiGLU stack [gate; up] (see
// QnDeviceWeight::paired_half; Error unless rows == 2 * paired_half, paired_half % 8 == 0).
QnDeviceWeight upload_qn_weight(const PackedWeight& w, DType act, int64_t paired_half = 0);
void free_qn_weight(QnDeviceWeight* w);  // frees and clears; safe on an empty weight

// The shared memory a block stages a weight's scale/bias pairs in: 64 bytes a group (16
// rows). Over 32 KB (K > 32768 at group 64, > 16384 at group 32) the kernels need the
// opt-in (up to ~217 KB of slab a block on the H100, ~89 KB on sm_86 / sm_89), which
// gemv_qn_allow_shared_memory grants; upload_qn_weight calls it, and gemv_qn* throw for a
// weight whose slab was not allowed.
size_t gemv_qn_scale_slab_bytes(const QnDeviceWeight& w);
// The bytes of the x row a block stages at M = 1 (GemvQnConfig::stage_x): K rounded up to
// the end of the last tile, zeros past K.
size_t gemv_qn_staged_x_bytes(const QnDeviceWeight& w);
// Grants the kernels of `w` the opt-in shared memory they need past 48 KB: the slab's, and
// at M = 1 the slab and a staged x row's (GemvQnConfig::stage_x; where the GPU has it).
// Throws Error (prefixed with `where`) when the GPU cannot give a block the weight's slab.
// Not for use inside a graph capture.
void gemv_qn_allow_shared_memory(const QnDeviceWeight& w, const std::string& where);

// Launch tuning; the defaults are what run_gemv_benchmarks measured best.
struct GemvQnConfig {
  int warps_per_block = 0;  // warps that split K for one block of 16 rows; 0 = automatic
                            // (at most 16; at most 8 when M > kGemvMaxM, larger values clamped)
  // At M = 1 each block stages x in shared memory, where x is 16-byte aligned, K % 8 == 0
  // and x fits beside the scale slab: -1 (automatic) while an SM still holds two blocks
  // (K up to ~35k at group 64, ~52k per channel on an H100), 1 wherever the opt-in has room, 0 never,
  // reading x from global memory as at M > 1 (for tests and A/Bs; kernels/qn/MEASURED.md
  // has the measurements).
  int stage_x = -1;
};
// Whether gemv_qn of `w` at M rows of x stages x in shared memory (GemvQnConfig::stage_x).
bool gemv_qn_stages_x(const QnDeviceWeight& w, int M, const void* x, const GemvQnConfig& config = {});

// A norm whose last step is left to the projection that reads it (norm != null in gemv_qn
// and gemv_qn_swiglu, see gemv_qn_residual below): y is scaled by
// r_m = rsqrt(Σ_p sum_squares[m, p] / K + eps) before the bias.
struct QnPendingNorm {
  const float* sum_squares = nullptr;  // [M, parts] F32
  int parts = 0;
  float eps = 0;
};
// Throws Error (naming `who`) for a set pending norm with parts < 1 or eps < 0 / NaN.
void check_pending_norm(const QnPendingNorm& norm, const char* who);

// y [M, N] (act) = x [M, K] (act) · Wᵀ (+ bias), on `stream`. x and y are device
// pointers, rows contiguous. Preconditions (checked, Error): 1 <= M <= kGemvQnMaxRows,
// act == w.act. Any pointer alignment works; 16-byte-aligned x with K % 8 == 0 takes the
// fast path for activations.
void gemv_qn(const QnDeviceWeight& w, const void* x, void* y, int M, DType act,
             cudaStream_t stream, const GemvQnConfig& config = {}, const QnPendingNorm* norm = nullptr);

// The SwiGLU of a paired weight (w.paired_half = h > 0, else Error): y [M, h] (act) =
// silu(gate) * up, gate and up the two halves of x · Wᵀ (+ bias) each rounded to act first,
// so y equals gemv_qn followed by the backend's silu_mul kernel bit for bit; one launch
// and no [M, 2h] round trip.
void gemv_qn_swiglu(const QnDeviceWeight& w, const void* x, void* y, int M, DType act, cudaStream_t stream,
                    const GemvQnConfig& config = {}, const QnPendingNorm* norm = nullptr);

// ---- The RMSNorm between two projections, fused into both (the model's residual stream
// at decode: QuantLinear::forward_residual). Saves the norm kernel's launch and its wait
// on the critical path, twice a layer: llama2-7b tg128 q4g64 401 -> 423 tok/s, q8 313 ->
// 336 (H100, 2026-11-23; leaving the norm kernels out altogether gave 433).
//
// The projection that ends a block (o, down): gemv_qn_residual
//   residual [M, N] += x · Wᵀ (+ bias)   (fp32 sum, rounded once to act)
//   scaled [M, N] = residual ∘ norm_weight   (act)
//   sum_squares [M, gemv_qn_blocks(w)] = per block of 16 rows, Σ residual² (fp32)
// The next projection (q/k/v, gate/up, the classifier) takes `scaled` as its x with a
// QnPendingNorm and scales its outputs by r_m = rsqrt(Σ_p sum_squares[m, p] / K + eps)
// before the bias: y = rmsnorm(residual) ∘ norm_weight · Wᵀ (+ bias). Each block sums the
// parts in the same order, so the result does not depend on scheduling.
int64_t gemv_qn_blocks(const QnDeviceWeight& w);  // = ceil(N / 16)
// PRECOND (Error): w.paired_half == 0, and those of gemv_qn. residual and scaled must not
// overlap x or each other. In fp16, scaled = residual ∘ norm_weight can overflow where the
// normed value would not (a norm weight far above 1 on a large residual); bf16 cannot.
void gemv_qn_residual(const QnDeviceWeight& w, const void* x, void* residual, const float* norm_weight,
                      void* scaled, float* sum_squares, int M, DType act, cudaStream_t stream,
                      const GemvQnConfig& config = {});

}  // namespace gemlite
