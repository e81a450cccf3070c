// FPx dequantize + matmul on tensor cores: which kernel runs, its launch, and the device
// copy of a weight. See gemm_fpx.h for the contract and fpx_format.h for the packed layout.
// The kernels: gemm_fpx_register.cuh (M <= 16, W and x in registers, split-K over blocks)
// and gemm_fpx_tiled.cuh (M > 16 on an H100: W and x staged in shared memory, wgmma, K split
// over a cluster); their launch shapes come from kernels/fpx/fpx_launch.cpp, measured there.
#include "kernels/fpx/gemm_fpx.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/device_upload.h"
#include "kernels/fpx/fpx_format.h"
#include "kernels/fpx/fpx_launch.h"
#include "kernels/fpx/fpx_tile.cuh"
#include "kernels/fpx/gemm_fpx_register.cuh"
#include "kernels/fpx/gemm_fpx_tiled.cuh"
#include "kernels/pdl.cuh"
#include "kernels/wgmma.cuh"  // wgmma_kernel_runs
#include "runtime/error.h"

namespace gemlite {

namespace {

using KernelFn = void (*)(GemmFpxParams);

template <int EBITS, int MBITS, bool BF16>
KernelFn pick_mt(int mt, int ahead) {
  switch (mt) {
    case 1: return ahead == 2 ? gemm_fpx_kernel<EBITS, MBITS, BF16, 1, 2> : gemm_fpx_kernel<EBITS, MBITS, BF16, 1, 1>;
    case 2: return gemm_fpx_kernel<EBITS, MBITS, BF16, 2, 1>;
    case 4: return gemm_fpx_kernel<EBITS, MBITS, BF16, 4, 1>;
    default: return gemm_fpx_kernel<EBITS, MBITS, BF16, 8, 1>;
  }
}

// A tiled kernel with its shared memory (more than the default 48 KB).
using TiledKernel = KernelWithSmem<KernelFn>;
template <int EBITS, int MBITS, bool BF16, int MT, int WARPS>
TiledKernel tiled_kernel() {
  return kernel_with_smem<gemm_fpx_tiled_kernel<EBITS, MBITS, BF16, MT, WARPS>,
                          TiledLayout<EBITS, MBITS, MT, WARPS>::kSmemBytes>();
}
// The shapes (TiledLayout's MT and warps; fpx_launch.h names them), the narrow one with
// 32 or 64 x rows.
template <int EBITS, int MBITS, bool BF16>
TiledKernel tiled_kernel(FpxTiledShape shape, int rows_x) {
  switch (shape) {
    case FpxTiledShape::kNarrow:
      return rows_x == 32 ? tiled_kernel<EBITS, MBITS, BF16, 4, 16>() : tiled_kernel<EBITS, MBITS, BF16, 8, 16>();
    case FpxTiledShape::kWideTall: return tiled_kernel<EBITS, MBITS, BF16, 16, 16>();
    default: return tiled_kernel<EBITS, MBITS, BF16, 16, 8>();
  }
}
TiledKernel pick_tiled_kernel(int ebits, int mbits, bool bf16, FpxTiledShape shape, int rows_x) {
  return with_fpx_code(ebits, mbits, "gemm_fpx", [&](auto e, auto m) -> TiledKernel {
    constexpr int E = decltype(e)::value, B = decltype(m)::value;
    return bf16 ? tiled_kernel<E, B, true>(shape, rows_x) : tiled_kernel<E, B, false>(shape, rows_x);
  });
}
// Every tiled shape runs one block an SM, so the blocks a device runs at once in clusters
// of each size are the same for all: asked of the driver once, for the tall kernel, for
// fpx_tiled_launch. Shared memory alone keeps every shape but fp5's 32-row narrow one
// (112 KB) to one block an SM; that one's 512 threads at 82-84 registers (ptxas, sm_90a)
// fill more than half of the 64K-register file.
static_assert(2 * TiledLayout<3, 2, 16, 8>::kSmemBytes > (228 << 10) &&
                  2 * TiledLayout<2, 2, 16, 8>::kSmemBytes > (228 << 10) &&
                  2 * TiledLayout<3, 2, 4, 16>::kSmemBytes > (228 << 10) &&
                  2 * TiledLayout<3, 2, 8, 16>::kSmemBytes > (228 << 10) &&
                  2 * TiledLayout<2, 2, 8, 16>::kSmemBytes > (228 << 10),
              "a tiled block fills more than half of an SM's shared memory");
FpxClusterBlocks tiled_cluster_blocks(int ebits, int mbits, bool bf16) {
  static std::mutex mutex;
  static std::map<KernelFn, FpxClusterBlocks> known;
  const TiledKernel tiled = pick_tiled_kernel(ebits, mbits, bf16, FpxTiledShape::kWideTall, 128);
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = known.find(tiled.kernel);
  if (it != known.end()) return it->second;
  static_assert(kFpxTiledMaxSplits == 8, "clusters of 1, 2, 4 and 8 blocks");
  FpxClusterBlocks resident{};
  resident_blocks_in_clusters(tiled.kernel, 16 * 32, tiled.smem_bytes, resident.of_size);
  known[tiled.kernel] = resident;
  return resident;
}

KernelFn pick_kernel(int ebits, int mbits, bool bf16, int mt, int ahead) {
  return with_fpx_code(ebits, mbits, "gemm_fpx", [&](auto e, auto m) {
    constexpr int E = decltype(e)::value, B = decltype(m)::value;
    return bf16 ? pick_mt<E, B, true>(mt, ahead) : pick_mt<E, B, false>(mt, ahead);
  });
}

int sm_count() {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// Warps of the MT = 2 register kernel an SM holds (its registers and shared memory; 16 on
// the H100 at 128 registers), for fpx_register_launch at M 9..16; asked of the driver once
// per kernel.
int mt2_resident_warps(int ebits, int mbits, bool bf16) {
  static std::mutex mutex;
  static std::map<KernelFn, int> known;
  const KernelFn kernel = pick_kernel(ebits, mbits, bf16, 2, 1);
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = known.find(kernel);
  if (it != known.end()) return it->second;
  int blocks = 0;  // of one warp each, its partial sums in shared memory (2 n-tiles)
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, reinterpret_cast<const void*>(kernel), 32,
                                                           2 * 4 * 32 * sizeof(float)));
  return known[kernel] = blocks;
}

// Whether the tiled kernel serves this weight: a device of compute capability 9.0 (wgmma,
// thread-block clusters, 227 KB of shared memory a block; the kernel takes <= 177 KB)
// running the kernel's sm_90a code -- not PTX of an older architecture compiled at load,
// where the wgmma and cluster helpers are empty (kernels/wgmma.cuh) -- and K % 8 == 0
// (16-byte copies of x and W). The device is read once per process (one GPU).
bool tiled_kernel_runs(const FpxDeviceWeight& w) {
  static const bool runs = wgmma_kernel_runs(gemm_fpx_tiled_kernel<3, 2, false, 4, 16>);
  return runs && w.K % 8 == 0;
}

}  // namespace

size_t FpxDeviceWeight::weight_bytes() const {
  return size_t(row_blocks) * size_t(k_tiles) * size_t(fpx_tile_bytes(bits)) + size_t(N) * 4 +
         (bias ? size_t(N) * 4 : 0);
}

FpxDeviceWeight alloc_fpx_weight(const WeightFormat& format, int64_t N, int64_t K, DType act) {
  const std::string where = "upload_fpx_weight (" + format.name() + ")";
  if (format.kind != FormatKind::FPX) fail(where, "not an fp6/fp5 weight");
  if (act != DType::F16 && act != DType::BF16)
    fail(where, std::string("activation type ") + dtype_name(act) + " (expected F16 or BF16)");
  if (K > (int64_t(1) << 30)) fail(where, "K = " + std::to_string(K) + " too large for the GPU kernel");
  pick_kernel(format.ebits, format.mbits, act == DType::BF16, 1, 1);  // throws for a code it was not built for
  FpxDeviceWeight d;
  d.act = act;
  d.ebits = format.ebits;
  d.mbits = format.mbits;
  d.bits = format.bits;
  d.N = N;
  d.K = K;
  d.k_tiles = fpx_k_tiles(K);
  d.row_blocks = fpx_row_blocks(N);
  // The most blocks split-K will use for this shape (M = 1 splits the most).
  d.max_splits = fpx_register_launch(d.row_blocks, d.k_tiles, 1, sm_count(), 0).splits;
  const size_t padded_n = size_t(d.row_blocks) * kFpxTileRows;
  try {
    d.packed = static_cast<uint8_t*>(device_weight_alloc(size_t(d.row_blocks * d.k_tiles * fpx_tile_bytes(d.bits))));
    d.row_factor = static_cast<float*>(device_weight_alloc(padded_n * 4));
    if (d.max_splits > 1) {
      d.workspace = static_cast<float*>(device_weight_alloc(size_t(d.max_splits) * kFpxSplitMaxM * padded_n * 4));
      d.counters = static_cast<int*>(device_weight_alloc(size_t(d.row_blocks) * 4));
      CUDA_CHECK(cudaMemset(d.counters, 0, size_t(d.row_blocks) * 4));
    }
  } catch (...) {
    free_fpx_weight(&d);
    throw;
  }
  return d;
}

FpxDeviceWeight upload_fpx_weight(const PackedWeight& w, DType act) {
  const std::string where = "upload_fpx_weight (" + w.format.name() + ")";
  const HostTensor& packed = w.part("packed");
  const size_t packed_bytes = size_t(fpx_row_blocks(w.rows) * fpx_k_tiles(w.cols) * fpx_tile_bytes(w.format.bits));
  if (w.format.kind == FormatKind::FPX && packed.nbytes() != packed_bytes)
    fail(where, "packed has shape " + packed.shape_string());
  FpxDeviceWeight d = alloc_fpx_weight(w.format, w.rows, w.cols, act);
  const uint16_t* scales = w.part("scales").as<uint16_t>();  // [N]
  const int bias_exponent = (1 << (d.ebits - 1)) - 1;
  std::vector<float> factor(size_t(d.row_blocks * kFpxTileRows), 0.0f);
  for (int64_t n = 0; n < d.N; ++n)
    factor[size_t(n)] = half_to_float(scales[n]) * (act == DType::F16 ? std::ldexp(1.0f, 15 - bias_exponent) : 1.0f);
  try {
    CUDA_CHECK(cudaMemcpy(const_cast<uint8_t*>(d.packed), packed.data, packed_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(const_cast<float*>(d.row_factor), factor.data(), factor.size() * 4, cudaMemcpyHostToDevice));
    d.bias = upload_bias(w);
  } catch (...) {
    free_fpx_weight(&d);
    throw;
  }
  return d;
}

void free_fpx_weight(FpxDeviceWeight* w) {
  device_weight_free(w->packed);
  device_weight_free(w->row_factor);
  device_weight_free(w->bias);
  device_weight_free(w->workspace);
  device_weight_free(w->counters);
  *w = FpxDeviceWeight{};
}

namespace {

// Epilogues besides y = x · Wᵀ (+ bias): a pending norm, the residual stream.
struct Epilogue {
  const QnPendingNorm* norm = nullptr;
  void* scratch = nullptr;  // gemm_fpx_scratch_bytes: x permuted for the tiled kernel
  size_t scratch_bytes = 0;
  void* residual = nullptr;
  const float* norm_weight = nullptr;
  float* sum_squares = nullptr;
};

void launch_gemm_fpx(const FpxDeviceWeight& w, const void* x, void* y, int M, DType act, cudaStream_t stream,
                     const GemmFpxConfig& config, const Epilogue& epilogue) {
  if (M < 1) throw Error("gemm_fpx: M = " + std::to_string(M) + " (expected >= 1)");
  if (act != w.act)
    throw Error(std::string("gemm_fpx: activations are ") + dtype_name(act) + " but the weight was uploaded for " +
                dtype_name(w.act));
  if (!w.packed) throw Error("gemm_fpx: weight not uploaded");
  if (config.tiles_ahead < 0 || config.tiles_ahead > 2)
    throw Error("gemm_fpx: tiles_ahead = " + std::to_string(config.tiles_ahead) + " (expected 0, 1 or 2)");
  if (config.m_tile != 0 && config.m_tile != 1 && config.m_tile != 2 && config.m_tile != 4 && config.m_tile != 8)
    throw Error("gemm_fpx: m_tile = " + std::to_string(config.m_tile) + " (expected 1, 2, 4 or 8)");
  static const int sms = sm_count();
  const int resident_warps = M > 8 && M <= 16 ? mt2_resident_warps(w.ebits, w.mbits, act == DType::BF16) : 0;
  const FpxRegisterLaunch s = fpx_register_launch(w.row_blocks, w.k_tiles, M, sms, resident_warps, config,
                                                  w.max_splits);
  GemmFpxParams p;
  p.packed = w.packed;
  p.row_factor = w.row_factor;
  p.bias = w.bias;
  p.x = static_cast<const uint16_t*>(x);
  p.y = static_cast<uint16_t*>(y);
  p.workspace = w.workspace;
  p.counters = w.counters;
  p.N = w.N;
  p.K = int(w.K);
  p.KT = int(w.k_tiles);
  p.RB = int(w.row_blocks);
  p.M = M;
  p.warps_n = s.warps_n;
  p.warps_k = s.warps_k;
  p.splits = s.splits;
  p.tiles_per_split = int((w.k_tiles + s.splits - 1) / s.splits);
  p.x_vectorized = w.K % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0;
  p.norm = epilogue.norm ? *epilogue.norm : QnPendingNorm{};
  check_pending_norm(p.norm, "gemm_fpx");
  p.residual = static_cast<uint16_t*>(epilogue.residual);
  p.norm_weight = epilogue.norm_weight;
  p.sum_squares = epilogue.sum_squares;
  const bool fused_norm = p.norm.sum_squares || p.residual;
  // M > kFpxMaxM, and a wide weight's M 9..16 (gemm_fpx_runs_tiled): the tiled kernel on
  // an H100-class device (wgmma), given a scratch buffer for the permuted copy of x and an x
  // aligned for permute_x_kernel's 16-byte loads, in the shape and cluster size
  // fpx_tiled_launch picks.
  const bool tiled_ok = tiled_kernel_runs(w) && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const bool automatic = config.tiled < 0 && config.m_tile == 0 && config.warps_k == 0;
  if (config.tiled < -1 || config.tiled > 3)
    throw Error("gemm_fpx: tiled = " + std::to_string(config.tiled) + " (expected -1, 0, 1, 2 or 3)");
  if (config.tiled > 0 && tiled_ok && !epilogue.scratch)
    throw Error("gemm_fpx: the tiled kernel needs a scratch buffer (gemm_fpx_scratch_bytes)");
  // At M <= kFpxMaxM a cluster size asked for (config.splits) is the register kernel's
  // split-K; above, the tiled kernel's cluster (automatic: the shape is picked for it).
  const bool register_splits = M <= kFpxMaxM && config.splits > 0;
  const bool use_tiled =
      tiled_ok && epilogue.scratch &&
      (config.tiled > 0 || (automatic && !register_splits && !fused_norm && gemm_fpx_runs_tiled(w, M)));
  if (use_tiled && reinterpret_cast<uintptr_t>(epilogue.scratch) % 16 != 0)
    throw Error("gemm_fpx: the scratch buffer must be 16-byte aligned");
  // The norm epilogues sit in the register kernel's one-chunk shape only (M <= kFpxMaxM).
  if (fused_norm && (use_tiled || s.warps_n != 1 || (M + 8 * s.mt - 1) / (8 * s.mt) != 1))
    throw Error("gemm_fpx: a fused RMSNorm at M = " + std::to_string(M) + " (expected 1.." +
                std::to_string(kFpxMaxM) + ", one chunk of x rows per block)");
  if (use_tiled) {
    if (config.splits > 0 && (config.splits > kFpxTiledMaxSplits || (config.splits & (config.splits - 1)) != 0))
      throw Error("gemm_fpx: splits = " + std::to_string(config.splits) + " for the tiled kernel (expected 1, 2, 4 or 8)");
    const FpxAllowedShapes allowed = config.tiled > 0
                                         ? FpxAllowedShapes{config.tiled == 1, config.tiled == 2, config.tiled == 3}
                                         : fpx_automatic_shapes(M);
    const FpxTiledLaunch launch = fpx_tiled_launch(
        w.row_blocks, w.k_tiles, M, tiled_cluster_blocks(w.ebits, w.mbits, act == DType::BF16), allowed, config.splits);
    const FpxTiledShape shape = launch.shape;
    const int rows_x = fpx_tiled_rows_x(shape, M), warps = fpx_tiled_row_blocks(shape);  // a warp a row block
    const int64_t m_chunks = (M + rows_x - 1) / rows_x;
    const int64_t groups = (w.row_blocks + warps - 1) / warps;
    const size_t image_bytes = size_t(m_chunks * rows_x) * size_t(w.k_tiles) * kFpxTileK * 2;
    if (epilogue.scratch_bytes < image_bytes)
      throw Error("gemm_fpx: the scratch buffer holds " + std::to_string(epilogue.scratch_bytes) +
                  " bytes; the tiled kernel's copy of x at M = " + std::to_string(M) + " takes " +
                  std::to_string(image_bytes) + " (gemm_fpx_scratch_bytes)");
    const int splits = launch.splits;
    p.splits = splits;
    p.tiles_per_split = int((w.k_tiles + splits - 1) / splits);
    // x into the scratch as the image of the kernel's stages, which the kernel reads as p.x.
    uint16_t* image = static_cast<uint16_t*>(epilogue.scratch);
    const int64_t steps = w.k_tiles * 8;  // a row's 16-k steps, one a thread
    launch_pdl("permute_x_kernel", permute_x_kernel, dim3(unsigned((steps + 255) / 256), unsigned(m_chunks * rows_x)),
               dim3(256), 0, stream, p.x, image, M, p.K, p.KT, rows_x);
    p.x = image;
    const dim3 grid{unsigned(m_chunks), unsigned(groups), unsigned(splits)};
    const TiledKernel tiled = pick_tiled_kernel(w.ebits, w.mbits, act == DType::BF16, shape, rows_x);
    launch_pdl_clusters("gemm_fpx_tiled_kernel", tiled.kernel, grid, dim3(1, 1, unsigned(splits)),
                        dim3(unsigned(warps * 32)), tiled.smem_bytes, stream, p);
    return;
  }
  const int warps = s.warps_n * s.warps_k;
  const size_t smem = size_t(warps) * s.mt * 4 * 32 * sizeof(float);
  const dim3 grid(unsigned((M + 8 * s.mt - 1) / (8 * s.mt)), unsigned((w.row_blocks + s.warps_n - 1) / s.warps_n),
                  unsigned(s.splits));
  const KernelFn kernel = pick_kernel(w.ebits, w.mbits, act == DType::BF16, s.mt, s.ahead);
  launch_pdl("gemm_fpx_kernel", kernel, grid, dim3(unsigned(warps * 32)), smem, stream, p);
}

}  // namespace

void gemm_fpx(const FpxDeviceWeight& w, const void* x, void* y, int M, DType act, cudaStream_t stream,
              const GemmFpxConfig& config, const QnPendingNorm* norm, void* scratch, size_t scratch_bytes) {
  Epilogue epilogue;
  epilogue.norm = norm;
  epilogue.scratch = scratch;
  epilogue.scratch_bytes = scratch_bytes;
  launch_gemm_fpx(w, x, y, M, act, stream, config, epilogue);
}

int64_t gemm_fpx_norm_parts(const FpxDeviceWeight& w) { return w.row_blocks; }

size_t gemm_fpx_scratch_bytes(const FpxDeviceWeight& w, int M) {
  return tiled_kernel_runs(w) ? size_t((M + 127) / 128 * 128) * size_t(w.k_tiles) * kFpxTileK * 2 : 0;
}

bool gemm_fpx_runs_tiled(const FpxDeviceWeight& w, int M) {
  if (M > kFpxMaxM) return tiled_kernel_runs(w);
  // Asked only where the rule may take the tiled kernel: the residency is a locked lookup.
  return fpx_small_m_may_tile(M) && tiled_kernel_runs(w) &&
         fpx_tiled_at_small_m(w.N, w.K, M, tiled_cluster_blocks(w.ebits, w.mbits, w.act == DType::BF16));
}

int gemm_fpx_max_m(const FpxDeviceWeight& w) { return tiled_kernel_runs(w) ? kFpxTiledMaxM : kFpxMaxM; }

void gemm_fpx_residual(const FpxDeviceWeight& w, const void* x, void* residual, const float* norm_weight,
                       void* scaled, float* sum_squares, int M, DType act, cudaStream_t stream) {
  if (!residual || !norm_weight || !sum_squares)
    throw Error("gemm_fpx_residual: the residual, norm weight and sum-of-squares pointers must be set");
  Epilogue epilogue;
  epilogue.residual = residual;
  epilogue.norm_weight = norm_weight;
  epilogue.sum_squares = sum_squares;
  launch_gemm_fpx(w, x, scaled, M, act, stream, {}, epilogue);
}

}  // namespace gemlite
