// The dense copy of a qN / s7 weight on the device (dequant_qn.h): one warp per 2 KB tile
// of the GEMV's own layout (16 block rows x 32 words, qn_tile_word_index), read with four
// 512-byte warp loads. Lane l of the warp holds words 8 (l % 4) .. 8 (l % 4) + 7 of block
// rows l / 4 and 8 + l / 4 (parts 0/2 and 1/3 of the tile), so for each code j those eight
// words give eight consecutive k of one row: one 16-byte store per row and code.
//
// Measured before this version (H100, Llama-2-7B q4g64 pp512, the dense copy made before
// every GEMM): one thread per word, its row and tile found by 64-bit division, every code's
// group and scale recomputed: pp512 17.7k tok/s against 36.4k with a persistent dense copy,
// i.e. the copies cost ~16 ms of a 30 ms chunk, ~1 TB/s for 16.7 GB written and read.
// This version, A/B against it on one H100 (2026-11-25): llama2-7b pp512 q4g64 15.3k ->
// 25.0k tok/s, q8 13.5k -> 24.3k, s7 15.8k -> 25.3k; the copy itself (`dequant` lines of
// gemlite-bench --kernels, fp16) at 84-97 % of the copy bandwidth on the Llama shapes
// (4096 x 22016 q4g64 86.9 us, 88.8 %), 67-90 % at 4096 x 4096.
//
// s7 (`sparse`, kernels/s7/s7_format.h): the word's 4 pair bytes, byte j covering k blocks
// 2j and 2j + 1 of the tile (k0 and k0 + 32); the kept element gets value7 * scale + bias
// of its own block's group, the other one exactly 0.
#include "kernels/qn/dequant_qn.h"

#include <cstdint>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/device_util.cuh"
#include "kernels/qn/qn_format.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

constexpr int kDequantWarps = 8;  // tiles per block

struct DequantQnParams {
  const uint32_t* qweight;     // [row_blocks, tiles_per_row, 512] (qn_tile_word_index)
  const uint32_t* scale_bias;  // [n_groups, row_blocks * 16] pairs (qn_scale_bias_index)
  uint16_t* out;               // [N, K] fp16 / bf16 bits
  int64_t N, paired_half;
  int K;
  int tiles_per_row, tiles;  // tiles = row_blocks * tiles_per_row
  int64_t sb_group_stride;   // N16 / 2: uint2 pairs of scale_bias per group
  int bits, group_shift, n_groups;
  bool sparse;
  bool vector_ok;  // K % 8 == 0 and out 16-byte aligned: a row's 8 k are one 16-byte store
};

// out[row, k .. k + 7] (those below K) = the 8 values, rounded to the activation type.
template <bool BF16>
__device__ __forceinline__ void store8(uint16_t* out_row, int k, int K, const float (&v)[8], bool vector_ok) {
  uint16_t h[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = to_activation<BF16>(v[i]);
  if (vector_ok && k + 8 <= K) {
    *reinterpret_cast<uint4*>(out_row + k) = make_uint4(h[0] | uint32_t(h[1]) << 16, h[2] | uint32_t(h[3]) << 16,
                                                        h[4] | uint32_t(h[5]) << 16, h[6] | uint32_t(h[7]) << 16);
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (k + i < K) out_row[k + i] = h[i];
}

// The code as an fp32 integer: 2^23 + q minus 2^23, two cheap ALU operations where an I2F
// goes through the quarter-rate conversion unit.
__device__ __forceinline__ float code_to_float(uint32_t q) { return __uint_as_float(0x4B000000u | q) - 8388608.0f; }

// PRECOND: blockDim.x = 32 kDequantWarps, gridDim.x = ceil(p.tiles / kDequantWarps).
template <bool BF16>
__global__ void __launch_bounds__(32 * kDequantWarps) dequant_qn_kernel(DequantQnParams p) {
  const int tile = blockIdx.x * kDequantWarps + threadIdx.x / 32;
  if (tile >= p.tiles) return;
  const int lane = threadIdx.x % 32;
  const int rb = tile / p.tiles_per_row, t = tile % p.tiles_per_row;  // row block, tile of the row
  const uint4* parts = reinterpret_cast<const uint4*>(p.qweight) + size_t(tile) * 128 + lane;
  const uint4 w00 = parts[0], w01 = parts[32], w10 = parts[64], w11 = parts[96];  // part c * 2 + h
  const uint32_t words[2][8] = {{w00.x, w00.y, w00.z, w00.w, w10.x, w10.y, w10.z, w10.w},   // row lane / 4
                                {w01.x, w01.y, w01.z, w01.w, w11.x, w11.y, w11.z, w11.w}};  // row 8 + lane / 4
  int64_t row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) row[h] = qn_stored_row(int64_t(rb) * 16 + 8 * h + lane / 4, p.paired_half);
  // The lane's {row lane / 4, row 8 + lane / 4} pair of group g: at + g * N16.
  const uint2* sb = reinterpret_cast<const uint2*>(p.scale_bias + size_t(rb) * 16) + lane / 4;
  const int codes = 32 / p.bits, blocks_per_code = p.sparse ? 2 : 1;
  const uint32_t mask = p.sparse ? 0x7Fu : (1u << p.bits) - 1;
  for (int j = 0; j < codes; ++j) {
    const int shift = 32 - p.bits * (j + 1);
    for (int e = 0; e < blocks_per_code; ++e) {
      const int block = (t * codes + j) * blocks_per_code + e;  // 32-k block of the row
      const int k = block * 32 + 8 * (lane % 4);
      if (k >= p.K) break;
      const uint2 pair = __ldg(sb + size_t(min(block >> p.group_shift, p.n_groups - 1)) * p.sb_group_stride);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (row[h] >= p.N) continue;  // a padding row of the last block
        const uint32_t bits = h == 0 ? pair.x : pair.y;
        const float scale = from_activation<BF16>(uint16_t(bits)), bias = from_activation<BF16>(uint16_t(bits >> 16));
        float v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint32_t code = words[h][i] >> shift;
          const bool kept = !p.sparse || ((code >> 7 & 1u) == (e == 0 ? 1u : 0u));
          v[i] = kept ? fmaf(code_to_float(code & mask), scale, bias) : 0.0f;
        }
        store8<BF16>(p.out + row[h] * p.K, k, p.K, v, p.vector_ok);
      }
    }
  }
}

}  // namespace

void dequant_qn(const QnDeviceWeight& w, void* out, cudaStream_t stream) {
  if (w.bits < 1 || w.bits > 8 || (w.sparse && w.bits != 8))
    throw Error("dequant_qn: " + std::to_string(w.bits) + "-bit" + (w.sparse ? " s7" : "") +
                " weights (qN, N = 1..8, or s7 pair bytes)");
  DequantQnParams p;
  p.qweight = w.qweight;
  p.scale_bias = w.scale_bias;
  p.out = static_cast<uint16_t*>(out);
  p.N = w.N;
  p.paired_half = w.paired_half;
  p.K = int(w.K);  // upload_qn_weight keeps K < 2^31 - 1024
  p.tiles_per_row = int(w.Kw / kWarpLanes);
  const int64_t tiles = qn_padded_rows(w.N) / 16 * p.tiles_per_row;
  // k = 32 block + 8 (lane % 4) + 7 reaches 32 * (32-k blocks of a row) - 1 and must fit an int.
  const int64_t k_blocks = w.Kw / kWarpLanes * (32 / w.bits) * (w.sparse ? 2 : 1);
  if (tiles >= (int64_t(1) << 31) || k_blocks * 32 >= (int64_t(1) << 31))
    throw Error("dequant_qn: " + std::to_string(w.N) + " x " + std::to_string(w.K) + " weight too large");
  p.tiles = int(tiles);
  p.sb_group_stride = qn_padded_rows(w.N) / 2;
  p.bits = w.bits;
  p.group_shift = w.group_shift;
  p.n_groups = int(w.n_groups);
  p.sparse = w.sparse;
  p.vector_ok = w.K % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const unsigned blocks = unsigned((tiles + kDequantWarps - 1) / kDequantWarps);
  if (w.act == DType::BF16)
    dequant_qn_kernel<true><<<blocks, 32 * kDequantWarps, 0, stream>>>(p);
  else
    dequant_qn_kernel<false><<<blocks, 32 * kDequantWarps, 0, stream>>>(p);
  CHECK_LAST_LAUNCH("dequant_qn_kernel");
}

}  // namespace gemlite
