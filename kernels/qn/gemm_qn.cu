// gemm_qn's host side: which weights the tiled kernel (gemm_qn_tiled.cuh) serves, the
// permuted copy of x it reads, and its launch (block shape and cluster size from
// qn_tiled_launch, kernels/qn/qn_launch.cpp). gemm_qn.h has the contract.
#include "kernels/qn/gemm_qn.h"

#include <array>
#include <map>
#include <mutex>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/pdl.cuh"
#include "kernels/qn/gemm_qn_tiled.cuh"
#include "kernels/qn/qn_launch.h"
#include "kernels/wgmma.cuh"  // wgmma_kernel_runs
#include "runtime/error.h"

namespace gemlite {

namespace {

using KernelFn = void (*)(GemmQnParams);

// The kernel of a width, activation type and block shape, with its shared memory.
using TiledKernel = KernelWithSmem<KernelFn>;
template <int BITS, bool BF16, int WARPS, bool SPARSE, int ROWS_X>
TiledKernel tiled_kernel() {
  return kernel_with_smem<gemm_qn_tiled_kernel<BITS, BF16, WARPS, SPARSE, ROWS_X>,
                          QnTiledLayout<BITS, WARPS, SPARSE, ROWS_X>::kSmemBytes>();
}
// The shape (qn_launch.h) of a launch's warps and x rows, where it exists at this width.
template <int BITS, bool BF16, bool SPARSE = false>
TiledKernel tiled_kernel(int warps, int rows_x) {
  constexpr int E = SPARSE ? 2 * (32 / BITS) : 32 / BITS;
  if constexpr (qn_tiled_16_warps_fit(E)) {
    if (warps == 16 && rows_x == qn_tiled_rows_x(E, 16))
      return tiled_kernel<BITS, BF16, 16, SPARSE, qn_tiled_rows_x(E, 16)>();
  }
  if constexpr (qn_tiled_wide_fits(E)) {
    if (warps == 8 && rows_x == 128) return tiled_kernel<BITS, BF16, 8, SPARSE, 128>();
  }
  if (warps != 8 || rows_x != qn_tiled_rows_x(E, 8))
    throw Error("gemm_qn: no block shape of " + std::to_string(warps) + " warps and " + std::to_string(rows_x) +
                " x rows at " + std::to_string(E) + " blocks a tile");
  return tiled_kernel<BITS, BF16, 8, SPARSE, qn_tiled_rows_x(E, 8)>();
}
template <bool BF16>
TiledKernel tiled_kernel(int bits, bool sparse, int warps, int rows_x) {
  if (sparse) return tiled_kernel<8, BF16, true>(warps, rows_x);  // s7: pair bytes packed as 8-bit codes
  switch (bits) {
    case 2: return tiled_kernel<2, BF16>(warps, rows_x);
    case 3: return tiled_kernel<3, BF16>(warps, rows_x);
    case 4: return tiled_kernel<4, BF16>(warps, rows_x);
    case 5: return tiled_kernel<5, BF16>(warps, rows_x);
    case 6: return tiled_kernel<6, BF16>(warps, rows_x);
    case 7: return tiled_kernel<7, BF16>(warps, rows_x);
    case 8: return tiled_kernel<8, BF16>(warps, rows_x);
  }
  throw Error("gemm_qn: " + std::to_string(bits) + "-bit codes are not served (2..8 are)");
}
TiledKernel tiled_kernel(const QnDeviceWeight& w, int warps, int rows_x) {
  return w.act == DType::BF16 ? tiled_kernel<true>(w.bits, w.sparse, warps, rows_x)
                              : tiled_kernel<false>(w.bits, w.sparse, warps, rows_x);
}

// Whether this device runs the kernels (wgmma_kernel_runs), asked once per process.
bool device_runs_tiled_kernel() {
  static const bool runs = wgmma_kernel_runs(gemm_qn_tiled_kernel<4, false, 8, false, 64>);
  return runs;
}

// 32-k blocks a tile: a code a block, two for s7's pair bytes.
int blocks_per_tile(const QnDeviceWeight& w) { return w.sparse ? 2 * (32 / w.bits) : 32 / w.bits; }

// Blocks the device runs at once in clusters of 1, 2, 4 and 8, per kernel, asked once.
std::array<int, 4> resident_blocks(const TiledKernel& tiled, int warps) {
  static std::mutex mutex;
  static std::map<KernelFn, std::array<int, 4>> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = known.find(tiled.kernel);
  if (it != known.end()) return it->second;
  std::array<int, 4> of_size{};
  int sizes[4];
  resident_blocks_in_clusters(tiled.kernel, warps * 32, tiled.smem_bytes, sizes);
  for (int i = 0; i < 4; ++i) of_size[size_t(i)] = sizes[i];
  return known[tiled.kernel] = of_size;
}

}  // namespace

bool gemm_qn_runs(const QnDeviceWeight& w) {
  return w.qweight && w.bits >= 2 && w.bits <= 8 && w.K % 8 == 0 && device_runs_tiled_kernel();
}

// H100, fp16, cold L2, us at M = 384 / 512, gemm_qn's fastest block shape against the dense
// copy + cuBLAS (gemlite-bench --kernels --kernel-set gemv, 2026-11-27):
//   q4g64 4096 x 12288  113.6 / 105.9   126.1 / 136.1     4096 x 22016  153.2 / 195.5   223.1 / 230.6
//         11008 x 4096   97.0 / 106.4   103.8 / 118.8     4096 x 4096    37.4 / 38.4     40.7 / 45.4
//   q8    4096 x 12288  123.7 / 107.7   127.6 / 131.7     4096 x 22016  172.1 / 203.2   242.8 / 234.0
//         11008 x 4096  106.1 / 108.7   117.5 / 117.3     4096 x 4096    42.7 / 38.5     45.6 / 42.8
// and llama2-7b pp512 (gemlite-bench -p 512 -n 0 -r 2, one H100, gemm_qn up to 512 rows
// against up to 256): q4g64 25978 against 24122 tok/s, q8 23126 against 23675.
int gemm_qn_max_m(const QnDeviceWeight& w) { return qn_tiled_wide_fits(blocks_per_tile(w)) ? 512 : 256; }

size_t gemm_qn_scratch_bytes(const QnDeviceWeight& w, int M) {
  if (!gemm_qn_runs(w)) return 0;
  const int E = blocks_per_tile(w);
  const int64_t rows_x = qn_tiled_wide_fits(E) ? 128 : qn_tiled_rows_x(E, 8);  // the most x rows of any shape
  return size_t((M + rows_x - 1) / rows_x * rows_x) * size_t(w.Kw) * size_t(E) * 2;
}

bool gemm_qn_has_shape(const QnDeviceWeight& w, const GemmQnConfig& config) {
  QnTiledResident any;
  for (auto& of : any.of) of = {1, 1, 1, 1};
  return qn_tiled_launch(1, 1, 1, blocks_per_tile(w), any, config.warps, config.rows_x).warps != 0;
}

void gemm_qn(const QnDeviceWeight& w, const void* x, void* y, int M, DType act, cudaStream_t stream, void* scratch,
             size_t scratch_bytes, const GemmQnConfig& config) {
  if (!gemm_qn_runs(w))
    throw Error("gemm_qn: not for this weight (" + std::to_string(w.bits) + "-bit" + (w.sparse ? " s7" : "") +
                ", K = " + std::to_string(w.K) + ") or device (gemm_qn_runs)");
  if (M < 1) throw Error("gemm_qn: M = " + std::to_string(M) + " (expected >= 1)");
  if (act != w.act)
    throw Error(std::string("gemm_qn: activations are ") + dtype_name(act) + " but the weight was uploaded for " +
                dtype_name(w.act));
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) throw Error("gemm_qn: x must be 16-byte aligned");
  const size_t image_bytes = gemm_qn_scratch_bytes(w, M);
  if (!scratch || reinterpret_cast<uintptr_t>(scratch) % 16 != 0 || scratch_bytes < image_bytes)
    throw Error("gemm_qn: the scratch buffer (" + std::to_string(scratch_bytes) + " bytes) must be 16-byte aligned and hold " +
                std::to_string(image_bytes) + " bytes at M = " + std::to_string(M) + " (gemm_qn_scratch_bytes)");
  if (config.splits != 0 && (config.splits > kQnTiledMaxSplits || (config.splits & (config.splits - 1)) != 0))
    throw Error("gemm_qn: splits = " + std::to_string(config.splits) + " (expected 0, 1, 2, 4 or 8)");
  if (config.warps != 0 && config.warps != 8 && config.warps != 16)
    throw Error("gemm_qn: warps = " + std::to_string(config.warps) + " (expected 0, 8 or 16)");
  if (config.rows_x != 0 && config.rows_x != 32 && config.rows_x != 64 && config.rows_x != 128)
    throw Error("gemm_qn: rows_x = " + std::to_string(config.rows_x) + " (expected 0, 32, 64 or 128)");

  const int tiles = int(w.Kw / 32);
  const int64_t row_blocks = qn_padded_rows(w.N) / 16;
  const int per_tile = blocks_per_tile(w);
  QnTiledResident resident{};
  for (int s = 0; s < kQnTiledShapes; ++s) {
    const QnTiledShapeOf shape = qn_tiled_shape(QnTiledShape(s), per_tile);
    if (shape.exists) resident.of[s] = resident_blocks(tiled_kernel(w, shape.warps, shape.rows_x), shape.warps);
  }
  const QnTiledLaunch launch =
      qn_tiled_launch(M, row_blocks, tiles, per_tile, resident, config.warps, config.rows_x, config.splits);
  if (launch.warps == 0)
    throw Error("gemm_qn: no block shape of " + std::to_string(config.warps) + " warps and " +
                std::to_string(config.rows_x) + " x rows (0: any) at " + std::to_string(per_tile) +
                " 32-k blocks a tile (" + (w.sparse ? std::string("s7") : std::to_string(w.bits) + "-bit codes") + ")");
  const int warps = launch.warps, rows_x = launch.rows_x, splits = launch.splits;
  const TiledKernel tiled = tiled_kernel(w, warps, rows_x);
  const int64_t m_chunks = (M + rows_x - 1) / rows_x;
  const int64_t groups = (row_blocks + warps - 1) / warps;

  GemmQnParams p;
  p.qweight = w.qweight;
  p.scale_bias = w.scale_bias;
  p.bias = w.bias;
  p.x = static_cast<const uint16_t*>(scratch);
  p.y = static_cast<uint16_t*>(y);
  p.N = w.N;
  p.N16 = qn_padded_rows(w.N);
  p.paired_half = w.paired_half;
  p.M = M;
  p.tiles = tiles;
  p.RB = int(row_blocks);
  p.n_groups = int(w.n_groups);
  p.group_shift = w.group_shift;
  p.tiles_per_split = (tiles + splits - 1) / splits;

  uint16_t* image = static_cast<uint16_t*>(scratch);
  const int64_t blocks = int64_t(tiles) * per_tile;  // a row's 32-k blocks, one a thread
  launch_pdl("permute_qn_x_kernel", permute_qn_x_kernel, dim3(unsigned((blocks + 255) / 256), unsigned(m_chunks * rows_x)),
             dim3(256), 0, stream, static_cast<const uint16_t*>(x), image, M, int(w.K), tiles, per_tile, rows_x);
  const dim3 grid{unsigned(m_chunks), unsigned(groups), unsigned(splits)};
  launch_pdl_clusters("gemm_qn_tiled_kernel", tiled.kernel, grid, dim3(1, 1, unsigned(splits)),
                      dim3(unsigned(warps * 32)), tiled.smem_bytes, stream, p);
}

}  // namespace gemlite
