// gemv_qn's host side: the device copy of a qN / s7 weight (the tile layout of its codes,
// the scale/bias pairs) and the launch of the kernel in gemv_qn_kernel.cuh, whose design
// and measurements are told there; gemv_qn.h has the contract.
#include "kernels/qn/gemv_qn.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/device_upload.h"
#include "kernels/group_quant.h"
#include "kernels/parallel.h"
#include "kernels/qn/gemv_qn_kernel.cuh"
#include "kernels/qn/qn_format.h"
#include "kernels/qn/qn_launch.h"
#include "kernels/s7/s7_format.h"
#include "runtime/error.h"

namespace gemlite {

namespace {

using KernelFn = void (*)(GemvQnParams);

template <bool BF16, int XROWS, bool XS>
KernelFn pick_kernel(int bits, bool sparse) {
  if (sparse) return gemv_qn_kernel<8, BF16, true, XROWS, XS>;
  switch (bits) {
    case 1: return gemv_qn_kernel<1, BF16, false, XROWS, XS>;
    case 2: return gemv_qn_kernel<2, BF16, false, XROWS, XS>;
    case 3: return gemv_qn_kernel<3, BF16, false, XROWS, XS>;
    case 4: return gemv_qn_kernel<4, BF16, false, XROWS, XS>;
    case 5: return gemv_qn_kernel<5, BF16, false, XROWS, XS>;
    case 6: return gemv_qn_kernel<6, BF16, false, XROWS, XS>;
    case 7: return gemv_qn_kernel<7, BF16, false, XROWS, XS>;
    case 8: return gemv_qn_kernel<8, BF16, false, XROWS, XS>;
  }
  throw Error("gemv_qn: bits " + std::to_string(bits) + " not in 1..8");
}

// The kernel of a weight's width, sparsity and activation type: the 16-row kernel (M >
// kGemvMaxM) or the 8-row one, the latter with x staged in shared memory or not.
template <bool BF16>
KernelFn pick_kernel(int bits, bool sparse, bool wide, bool staged_x) {
  if (wide) return pick_kernel<BF16, kGemvQnMaxRows, false>(bits, sparse);
  if (staged_x) return pick_kernel<BF16, kGemvMaxM, true>(bits, sparse);
  return pick_kernel<BF16, kGemvMaxM, false>(bits, sparse);
}
KernelFn pick_kernel(const QnDeviceWeight& w, bool wide, bool staged_x) {
  return w.act == DType::BF16 ? pick_kernel<true>(w.bits, w.sparse, wide, staged_x)
                              : pick_kernel<false>(w.bits, w.sparse, wide, staged_x);
}

int log2_exact(int64_t v) {  // -1 when v is not a power of two
  int s = 0;
  while ((int64_t(1) << s) < v) ++s;
  return (int64_t(1) << s) == v ? s : -1;
}

// Whether a block's x fragments may be 16-byte loads (GemvQnParams::x_vectorized). K % 8 ==
// 4 (K = 4100 in the tests) takes the scalar path too since x became one 16-byte load per
// block; every model's K is a multiple of 64.
bool x_vectorized(const QnDeviceWeight& w, const void* x) {
  return w.K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

uint16_t to_activation_bits(float v, DType act) {
  return act == DType::BF16 ? float_to_bf16(v) : float_to_half(v);
}

// The dynamic shared memory each kernel may launch with past the default 48 KB (its
// cudaFuncAttributeMaxDynamicSharedMemorySize, set by gemv_qn_allow_shared_memory),
// recorded on the host so that a launch can check it without a driver call. One device:
// the attribute is the current device's, and nothing here calls cudaSetDevice; a runtime
// over several GPUs would key these records by device.
std::mutex allowed_mutex;
std::map<KernelFn, size_t> allowed_dynamic;

// The attribute only ever grows: an earlier weight's larger slab stays allowed. The caller
// holds allowed_mutex.
void allow_dynamic(KernelFn kernel, size_t bytes) {
  size_t& allowed = allowed_dynamic[kernel];
  if (allowed >= bytes) return;
  CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(bytes)));
  allowed = bytes;
}

size_t allowed_dynamic_of(KernelFn kernel) {
  const std::lock_guard<std::mutex> lock(allowed_mutex);
  const auto it = allowed_dynamic.find(kernel);
  return it == allowed_dynamic.end() ? 0 : it->second;
}

// The dynamic shared memory of a launch with x staged: the scale slab, then x row 0.
size_t staged_dynamic_bytes(const QnDeviceWeight& w) { return gemv_qn_scale_slab_bytes(w) + gemv_qn_staged_x_bytes(w); }

size_t sm_shared_bytes() {
  static const size_t bytes = [] {
    int device = 0, value = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    return size_t(value);
  }();
  return bytes;
}

// Blocks of `warps` warps of `kernel` an SM holds with `dynamic` bytes of dynamic shared
// memory (the scale slab, and a staged x at M = 1). Up to 32 KB:
// 16 warps an SM (the kernel's 128 registers a thread, measured with ncu on the H100),
// fewer blocks where their shared memory (static + slab + 1 KB the driver keeps) does not
// fit the SM's: on the H100 five blocks of 3 warps fit every such slab; on an A100 (164
// KB) or sm_86 / sm_89 (100 KB) the larger slabs do not. Past 32 KB (a slab in the opt-in
// memory, or slab and x): the driver's occupancy of the kernel, once per (kernel, warps,
// bytes).
int resident_blocks(KernelFn kernel, int warps, size_t dynamic) {
  if (dynamic <= kScaleSlabDefaultBytes) {
    const int fit = int(sm_shared_bytes() / (kStaticSharedBound + dynamic + 1024));
    return std::min(16 / warps, fit);
  }
  static std::mutex mutex;
  static std::map<std::tuple<KernelFn, int, size_t>, int> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(kernel, warps, dynamic);
  const auto it = known.find(key);
  if (it != known.end()) return it->second;
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, reinterpret_cast<const void*>(kernel), warps * 32,
                                                           dynamic));
  return known[key] = blocks;
}

// The kernels that run a weight without staging x, which past 32 KB of scales take the
// opt-in: the 8- and 16-row versions (the staged kernel's allowance, slab and x, is
// gemv_qn_allow_shared_memory's second).
std::array<KernelFn, 2> kernels_of(const QnDeviceWeight& w) {
  return {pick_kernel(w, false, false), pick_kernel(w, true, false)};
}

}  // namespace

size_t gemv_qn_scale_slab_bytes(const QnDeviceWeight& w) { return size_t(w.n_groups) * 64; }

// Kw / 32 tiles of 32 E k blocks (kTileBlocks: E a code of a word, two a pair byte of s7).
size_t gemv_qn_staged_x_bytes(const QnDeviceWeight& w) {
  const int64_t tile_blocks = w.sparse ? 2 * qn_codes_per_word(8) : qn_codes_per_word(w.bits);
  return size_t(w.Kw * tile_blocks) * 2;
}

void gemv_qn_allow_shared_memory(const QnDeviceWeight& w, const std::string& where) {
  const size_t slab = gemv_qn_scale_slab_bytes(w), staged = staged_dynamic_bytes(w);
  if (slab <= kScaleSlabDefaultBytes && staged + kStaticSharedBound <= kDefaultSharedBytes) return;
  int device = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (slab + kStaticSharedBound > size_t(optin))
    throw Error(where + ": K = " + std::to_string(w.K) + " at group " + std::to_string(w.group) + " needs " +
                std::to_string((slab + kStaticSharedBound + 1023) >> 10) +
                " KB of shared memory a block for its scales; this GPU offers " + std::to_string(optin >> 10) +
                " KB (a larger group or per-channel scales would fit)");
  // Not at launch: it is not a stream operation, and launches may be captured into a graph.
  const std::lock_guard<std::mutex> lock(allowed_mutex);
  if (slab > kScaleSlabDefaultBytes)
    for (const KernelFn kernel : kernels_of(w)) allow_dynamic(kernel, slab);
  if (staged + kStaticSharedBound > kDefaultSharedBytes && staged + kStaticSharedBound <= size_t(optin))
    allow_dynamic(pick_kernel(w, false, true), staged);
}

void check_pending_norm(const QnPendingNorm& norm, const char* who) {
  if (norm.sum_squares && (norm.parts < 1 || !(norm.eps >= 0)))
    throw Error(std::string(who) + ": a pending norm of " + std::to_string(norm.parts) + " parts, eps " +
                std::to_string(norm.eps));
}

size_t QnDeviceWeight::weight_bytes() const {
  return size_t(qn_padded_rows(N)) * size_t(Kw + n_groups) * 4 + (bias ? size_t(N) * 4 : 0);
}

QnDeviceWeight upload_qn_weight(const PackedWeight& w, DType act, int64_t paired_half) {
  const std::string where = "upload_qn_weight (" + w.format.name() + ")";
  if (w.format.kind != FormatKind::QN && w.format.kind != FormatKind::S7) fail(where, "not a qN or s7 weight");
  const bool sparse = w.format.kind == FormatKind::S7;
  if (act != DType::F16 && act != DType::BF16)
    fail(where, std::string("activation type ") + dtype_name(act) + " (expected F16 or BF16)");
  QnDeviceWeight d;
  d.act = act;
  d.bits = sparse ? 8 : w.format.bits;  // s7 pair bytes are packed as q8 codes
  d.sparse = sparse;
  d.group = w.format.group;
  d.N = w.rows;
  d.K = w.cols;
  if (paired_half < 0 || (paired_half > 0 && (d.N != 2 * paired_half || paired_half % 8 != 0)))
    fail(where, "a SwiGLU pair of halves of " + std::to_string(paired_half) + " rows over " + std::to_string(d.N) +
                    " rows (expected rows = 2 halves, a multiple of 8 each)");
  d.paired_half = paired_half;
  if (d.K > (int64_t(1) << 31) - 1024) fail(where, "K = " + std::to_string(d.K) + " too large for the GPU kernel");
  d.Kw = sparse ? s7_words_per_row(d.K) : qn_words_per_row(d.K, d.bits);
  if (d.Kw * 16 >= (int64_t(1) << 32))  // load_tile's 32-bit word offset in a row block: t * 512 < 16 Kw
    fail(where, "K = " + std::to_string(d.K) + " too large for the GPU kernel at " + std::to_string(d.bits) + " bits");
  d.n_groups = group_count(d.group, d.K);
  if (d.n_groups == 1) {
    d.group_shift = 30;  // every k in group 0 (the index is clamped as well)
  } else {
    d.group_shift = log2_exact(group_size(d.group, d.K) / 32);
    if (d.group % 32 != 0 || d.group_shift < 0)
      fail(where, "group " + std::to_string(d.group) + " not supported on the GPU (expected 32 * 2^i or per-channel)");
  }
  gemv_qn_allow_shared_memory(d, where);
  const HostTensor& qweight = w.part("qweight");
  const uint16_t* scales = w.part("scales").as<uint16_t>();  // [N, n_groups]
  const uint16_t* zeros = w.part("zeros").as<uint16_t>();    // [N, n_groups]
  if (qweight.nbytes() != size_t(d.N * d.Kw * 4)) fail(where, "qweight has shape " + qweight.shape_string());
  // [n_groups, N16 / 16, 8, 2]: pair (g, block row v) at qn_scale_bias_index, so that lane
  // gid of a 16-row block loads the pairs of its rows gid and gid + 8 with one 8-byte load
  // and a warp's load is 64 contiguous bytes. The checkpoint's [N, n_groups] put the 8 rows
  // of a load in 8 sectors: ncu counted 31 % of all sectors as excess. Padding rows
  // (N <= n < N16) repeat row N - 1; their outputs are never stored.
  const int64_t N16 = qn_padded_rows(d.N);
  std::vector<uint32_t> scale_bias(size_t(N16 * d.n_groups));
#pragma omp parallel for schedule(static) if (N16 * d.n_groups >= kMinParallelWork)
  for (int64_t n = 0; n < N16; ++n)
    for (int64_t g = 0; g < d.n_groups; ++g) {
      const int64_t i = std::min(n, d.N - 1) * d.n_groups + g;  // [N, n_groups]
      const float s = half_to_float(scales[i]), z = half_to_float(zeros[i]);
      // z * s is exact in fp32 (11-bit significands), so this rounds once.
      scale_bias[size_t(qn_scale_bias_index(g, qn_block_row(n, paired_half), N16))] =
          uint32_t(to_activation_bits(s, act)) | uint32_t(to_activation_bits(-z * s, act)) << 16;
    }
  // The tile layout (qn_tile_word_index): each load instruction of a warp reads 512
  // contiguous bytes, a tile 2 KB, where the checkpoint's rows gave 8 pieces of 64 bytes a
  // row stride apart. H100, fp16, M = 1, cold L2, % of copy, [N, Kw] rows -> tiles, both
  // binaries in one session (gemlite-bench --kernels): 8192 x 57344 q8 93.8 -> 100.5,
  // q4g64 78.9 -> 85.7, q2g64 55.2 -> 57.3; 8192 x 8192 q4g64 63.8 -> 68.8; K 4096 N 22016
  // q4g64 60.8 -> 65.7, q8 80.1 -> 86.4; 4096 x 4096 q4g64 44.6 -> 46.4. llama2-7b q4g64
  // tg128 371.7 -> 388.6 tok/s (pp512 16991 -> 16705: dequant_qn, then one thread a word,
  // gathered 64-byte pieces; since c1e0a45 it reads whole tiles).
  // Rows are rearranged by all threads into fresh zero pages (HostTensor::zeros; padding rows
  // stay zero), where a zero-filled vector and one thread had made uploading a qN model
  // slower than an fp6 one (kernels/parallel.h has the measurement).
  const uint32_t* words = qweight.as<uint32_t>();  // [N, Kw]
  HostTensor tile_words = HostTensor::zeros(DType::I32, {N16 * d.Kw});  // [N16 / 16, Kw / 32, 512]
  uint32_t* tiles = tile_words.mutable_as<uint32_t>();
#pragma omp parallel for schedule(static) if (d.N * d.Kw >= kMinParallelWork)
  for (int64_t n = 0; n < d.N; ++n) {
    const int64_t v = qn_block_row(n, paired_half);
    for (int64_t kw = 0; kw < d.Kw; kw += 4)  // 4 words stay together
      std::memcpy(&tiles[qn_tile_word_index(v, kw, d.Kw / 32)], &words[n * d.Kw + kw], 16);
  }
  try {
    uint32_t* q = static_cast<uint32_t*>(device_weight_alloc(tile_words.nbytes()));
    d.qweight = q;
    CUDA_CHECK(cudaMemcpy(q, tiles, tile_words.nbytes(), cudaMemcpyHostToDevice));
    uint32_t* sb = static_cast<uint32_t*>(device_weight_alloc(scale_bias.size() * 4));
    d.scale_bias = sb;
    CUDA_CHECK(cudaMemcpy(sb, scale_bias.data(), scale_bias.size() * 4, cudaMemcpyHostToDevice));
    d.bias = upload_bias(w);
  } catch (...) {
    free_qn_weight(&d);
    throw;
  }
  return d;
}

void free_qn_weight(QnDeviceWeight* w) {
  device_weight_free(w->qweight);
  device_weight_free(w->scale_bias);
  device_weight_free(w->bias);
  *w = QnDeviceWeight{};
}

namespace {

// Epilogues besides y = x · Wᵀ (+ bias): SwiGLU, a pending norm, the residual stream.
struct Epilogue {
  bool swiglu = false;
  const QnPendingNorm* norm = nullptr;
  void* residual = nullptr;
  const float* norm_weight = nullptr;
  float* sum_squares = nullptr;
};

void launch_gemv_qn(const QnDeviceWeight& w, const void* x, void* y, int M, DType act, const Epilogue& epilogue,
                    cudaStream_t stream, const GemvQnConfig& config) {
  if (M < 1 || M > kGemvQnMaxRows)
    throw Error("gemv_qn: M = " + std::to_string(M) + " (expected 1.." + std::to_string(kGemvQnMaxRows) + ")");
  if (act != w.act)
    throw Error(std::string("gemv_qn: activations are ") + dtype_name(act) + " but the weight was uploaded for " +
                dtype_name(w.act));
  if (!w.qweight) throw Error("gemv_qn: weight not uploaded");
  GemvQnParams p;
  p.qweight = w.qweight;
  p.scale_bias = w.scale_bias;
  p.bias = w.bias;
  p.x = static_cast<const uint16_t*>(x);
  p.y = static_cast<uint16_t*>(y);
  p.N = w.N;
  p.K = int(w.K);
  p.Kw = w.Kw;
  p.n_groups = int(w.n_groups);
  p.sb_group_stride = uint32_t(qn_padded_rows(w.N) / 2);
  p.group_shift = w.group_shift;
  p.M = M;
  p.x_vectorized = x_vectorized(w, x);
  p.paired_half = w.paired_half;
  p.swiglu = epilogue.swiglu;
  p.norm = epilogue.norm ? *epilogue.norm : QnPendingNorm{};
  check_pending_norm(p.norm, "gemv_qn");
  p.residual = static_cast<uint16_t*>(epilogue.residual);
  p.norm_weight = epilogue.norm_weight;
  p.sum_squares = epilogue.sum_squares;

  // Warps per block: qn_warps_per_block (kernels/qn/qn_launch.cpp), at the blocks an SM
  // holds (resident_blocks).
  const int64_t tiles = w.Kw / 32;
  const int64_t blocks = (w.N + kRowsPerBlock - 1) / kRowsPerBlock;
  const size_t slab = gemv_qn_scale_slab_bytes(w);
  const bool x_shared = gemv_qn_stages_x(w, M, x, config);  // the kernel's XS
  const size_t dynamic_shared = x_shared ? staged_dynamic_bytes(w) : slab;
  const bool wide = M > kGemvMaxM;  // the 16-row kernel
  int warps = config.warps_per_block;
  if (warps <= 0) {
    int device = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const KernelFn narrow = pick_kernel(w, false, x_shared);  // the 16-row kernel's occupancy: close enough
    warps = qn_warps_per_block(blocks, sms, wide, x_shared,
                               [&](int per_block) { return resident_blocks(narrow, per_block, dynamic_shared); });
  }
  warps = int(std::clamp<int64_t>(std::min<int64_t>(warps, tiles), 1, wide ? kMaxWarpsOf<kGemvQnMaxRows> : kMaxWarps));
  const KernelFn kernel = pick_kernel(w, wide, x_shared);
  if (dynamic_shared + kStaticSharedBound > kDefaultSharedBytes && allowed_dynamic_of(kernel) < dynamic_shared)
    throw Error("gemv_qn: the weight's " + std::to_string(dynamic_shared >> 10) + " KB of shared memory a block (" +
                (x_shared ? "scales and x" : "scales") +
                ") were not allowed (gemv_qn_allow_shared_memory; upload_qn_weight does it)");
  launch_pdl("gemv_qn_kernel", kernel, dim3(unsigned(blocks)), dim3(unsigned(warps * 32)), dynamic_shared, stream, p);
}

}  // namespace

// One activation row staged in shared memory after the slab: where both fit the 48 KB a
// block has without the opt-in (K up to ~13k at group 64), and past that in the opt-in
// (gemv_qn_allow_shared_memory) while an SM still holds two blocks, the 16 warps of 8-warp
// blocks the registers allow (qn_warps_per_block takes 8 there; K up to ~35k at group 64,
// ~52k per channel, on the 228 KB SMs of an H100 or H200: Llama-2-70B's down projection
// among them); stage_x = 1 takes all the opt-in gives. Two blocks, not four as before: one
// H200, fp16, M = 1, cold L2, automatic warps, x from global -> staged
// (GEMLITE_BENCH_STAGE_X=0,-1), 2026-11-29: 22016 x 8192 (three blocks an SM at group 64)
// q4g64 34.9 -> 28.9 µs, q2g64 29.0 -> 23.1, q8 46.1 -> 44.7, q6g64 44.1 -> 43.6, s7 34.1 ->
// 31.2; 28672 x 8192 (two) q4g64 44.7 -> 39.1, q2g64 36.6 -> 28.7, q8 59.9 -> 57.8, q6g64
// 59.9 -> 55.6; 32768 x 4096 (two) q4g64 24.5 -> 21.1; bf16 28672 x 8192 q4g64 45.6 -> 42.6,
// q8 65.9 -> 60.8. No format slower.
bool gemv_qn_stages_x(const QnDeviceWeight& w, int M, const void* x, const GemvQnConfig& config) {
  if (config.stage_x == 0 || M != 1 || !x_vectorized(w, x)) return false;
  // A raw-code kernel applies a group's scale once per two 32-k blocks (qn_raw_codes,
  // gemv_qn_kernel.cuh): its groups of 32 k run unstaged.
  if (qn_raw_codes(w.bits, w.act == DType::BF16, w.sparse) && w.n_groups > 1 && w.group_shift < 1) return false;
  const size_t dynamic = staged_dynamic_bytes(w);
  if (dynamic + kStaticSharedBound <= kDefaultSharedBytes) return true;
  if (allowed_dynamic_of(pick_kernel(w, false, true)) < dynamic) return false;
  return config.stage_x == 1 || 2 * (dynamic + kStaticSharedBound + 1024) <= sm_shared_bytes();
}

void gemv_qn(const QnDeviceWeight& w, const void* x, void* y, int M, DType act, cudaStream_t stream,
             const GemvQnConfig& config, const QnPendingNorm* norm) {
  Epilogue epilogue;
  epilogue.norm = norm;
  launch_gemv_qn(w, x, y, M, act, epilogue, stream, config);
}

void gemv_qn_swiglu(const QnDeviceWeight& w, const void* x, void* y, int M, DType act, cudaStream_t stream,
                    const GemvQnConfig& config, const QnPendingNorm* norm) {
  if (w.paired_half <= 0) throw Error("gemv_qn_swiglu: the weight was not uploaded as a SwiGLU pair");
  Epilogue epilogue;
  epilogue.swiglu = true;
  epilogue.norm = norm;
  launch_gemv_qn(w, x, y, M, act, epilogue, stream, config);
}

int64_t gemv_qn_blocks(const QnDeviceWeight& w) { return (w.N + kRowsPerBlock - 1) / kRowsPerBlock; }

void gemv_qn_residual(const QnDeviceWeight& w, const void* x, void* residual, const float* norm_weight,
                      void* scaled, float* sum_squares, int M, DType act, cudaStream_t stream,
                      const GemvQnConfig& config) {
  if (w.paired_half != 0) throw Error("gemv_qn_residual: a SwiGLU pair has no residual output");
  if (!residual || !norm_weight || !scaled || !sum_squares)
    throw Error("gemv_qn_residual: residual, norm weight, scaled output and sum of squares are all needed");
  Epilogue epilogue;
  epilogue.residual = residual;
  epilogue.norm_weight = norm_weight;
  epilogue.sum_squares = sum_squares;
  launch_gemv_qn(w, x, scaled, M, act, epilogue, stream, config);
}

}  // namespace gemlite
