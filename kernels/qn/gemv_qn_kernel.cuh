#pragma once
// The fused qN dequantize + GEMV kernel on tensor cores (and s7 on the same kernel);
// included by kernels/qn/gemv_qn.cu only, which uploads weights and launches it (gemv_qn.h
// has the contract, kernels/qn/qn_launch.cpp the launch rule, kernels/qn/MEASURED.md the
// measurements behind the choices below).
//
// Work split. A block owns 16 rows of W (one m16n8k16 A tile: rows 16b .. 16b + 15, or for
// a SwiGLU pair the gate rows [8b, 8b + 8) and the up rows h + [8b, 8b + 8)); its warps split K by
// tiles (tile t = the 32 words of a row covering 32*E codes, E = 32 / bits), warp w taking
// t = w, w + warps, ... so the block sweeps each row front to back; the warps' fp32
// partial sums meet in shared memory at the end.
//
// Inside a warp, lane = 4 * gid + tig. For rows gid and gid + 8 of the block, lane loads
// the words 8tig + 4c + u (u = 0..3) of tile t for both chunks c = 0, 1: two 16-byte
// loads per row and tile (each warp load 512 contiguous bytes of the device's tile layout,
// qn_tile_word_index). Word 8tig + 4c + u holds, at code j, the weight of
// k = 32 (t E + j) + 8tig + 4c + u. The mma's k order is ours to choose as long as A and B
// agree, so one mma per (c, j) takes mma-k 2tig, 2tig + 1 from u0, u1 and 2tig + 8,
// 2tig + 9 from u2, u3:
//   A (16 x 16)  a0 = row gid    {u0, u1}   a2 = row gid    {u2, u3}
//                a1 = row gid+8  {u0, u1}   a3 = row gid+8  {u2, u3}
//   B (16 x 8)   b0 = x[gid][k+0, k+1],     b1 = x[gid][k+2, k+3]   (k = 32 (t E + j) + 8tig + 4c;
//                lanes gid >= M load row 0: their columns are never stored),
//   C = y for the 16 rows x 8 activation rows, fp32.
// Pairing the same code j of two neighbouring words keeps both halves of an A register
// in one group (one broadcast scale), and the 8 k of a lane for both chunks are
// consecutive: one 16-byte load of x per 32-k block, with x in its own order (staged in
// shared memory at M = 1, below, it is a plain copy).
//
// Dequantization of a pair, for fp16 (bf16 in brackets): the same code of two
// neighbouring words sits in the two 16-bit halves of one register (two shared permutes
// per word pair give all codes inside a half, see CodeLayout), one lop3 masks the code and
// ORs the exponent of 1024 [128], giving 1024 + 2^d q exactly; one fma2 with constants
// removes the offset and the 2^d exactly, one fma2 applies scale and -zero*scale:
// w = q * s + (-z s). bf16 8-bit codes do not fit the 7-bit bf16 mantissa, so they go
// through fp32 (0x4B000000 | q) - 2^23 instead. s7 (kernels/s7/gemv_s7.h) is the same
// kernel with SPARSE: a pair byte's 7-bit value, masked into one of two 32-k blocks.
//
// Epilogues (after the warps' partial sums meet in shared memory): plain y = x · Wᵀ + bias;
// SwiGLU of a paired weight, silu(gate) * up; a pending RMSNorm (QnPendingNorm: outputs
// scaled by rsqrt of the producer's summed parts); the residual stream (gemv_qn_residual:
// residual += y, y = residual ∘ norm weight, per-block sums of squares). gemv_qn.h has
// the contracts; none of them changes the loop.
//
// Nine to 16 activation rows (short prompts, sliced by CudaLinear) take a second
// instantiation, XROWS = 16, that turns the mma around: x is the A operand (16 rows) and
// the dequantized weights, the same registers as above, are B of two n = 8 mmas (block
// rows 0..7 and 8..15; compute_chunk). The dequantization, most of a tile's instructions,
// is shared by twice the rows: one M = 16 launch cost 0.62-0.77x two M = 8 launches on the
// H100 (kernels/qn/MEASURED.md). At 128 registers ptxas spills 0-96 bytes in it, none in
// the 8-row kernel, whose code the template left as it was.
//
// Per chunk of 2 k blocks a lane loads one 8-byte {scale, bias} pair per block (rows gid
// and gid + 8 side by side: the device layout of scale_bias, see gemv_qn.h) and one
// 16-byte x fragment per block (two in the 16-row kernel); the next chunk's (or next
// tile's first chunk's) loads are issued before this chunk's dequantization and mmas.
//
// The pairs come from shared memory: each block copies all of its pairs (64 bytes a group,
// 4 KB at K = 4096 and group 64) with cp.async before its PDL wait, beside its first tile
// of W. From global memory they had been the largest stall (ncu, q4g64 4096 x 22016: 48 %
// of warp stall samples on long scoreboard, two thirds of them in the dequantizing fma2
// waiting for a pair; the pairs are 64-byte pieces of lines, an L1 hit rate of 21 %); in
// shared memory llama2-7b q4g64 decode ran 3 % faster. Slabs over 32 KB (K > 32768 at group
// 64) take the opt-in shared memory, fewer blocks an SM.
//
// At M = 1 (decode) each block also copies x (8 KB at K = 4096) into shared memory after
// the slab, through L1 (one L2 read an SM), once its PDL wait is over, with zeros past K up
// to the last tile's end (XS; GemvQnConfig::stage_x has where it fits), and every tile,
// the one reaching past K too, reads x there: one 16-byte shared load a 32-k block at a
// 32-bit address, no L1 prefetches of the next tile's x lines, no 64-bit address per chunk
// (when it came, the q4 fp16 kernel's SASS 3640 -> 3112 instructions; H200: q4g64 4096 x
// 22016 20.6 -> 18.3 µs, llama2-7b q4g64 tg128 +11 %). Alone it loses 0.1-0.6
// µs where the copy before the first tile is not hidden (4096 x 4096, one wave of two tiles
// a warp), but in the model it gains there too, so it runs wherever it fits.
//
// Raw codes (the staged kernel at 2 and 4 bits in fp16, qn_raw_codes): the lop3 ORs no
// magic, so each half is the fp16 subnormal 2^(offset - 24) q, exact, and the tensor cores
// take it as it is (subnormal A operands run as fast as normal ones). A chunk's two blocks
// (one group) each get their own mma chain; then, in fp32, acc += scale (the chains times
// 2^-offset) + bias Σ x, Σ x of the chunk from a third mma chain whose A is all ones at 4
// bits (kRawSumsByMma), summed by each warp from the staged x a tile ahead at 2
// (raw_tile_sums). It drops the two fma2 a pair (counted in the source, the q4 loop's 192
// decoding instructions a tile become 64 lop3s plus ~50 for the four chunks' folds and the
// tile's sums, which the ones chain later replaced by 16 mmas), and no weight of a full
// tile is rounded to fp16 (the tile reaching past K decodes fma2, so that a row shorter
// than a tile sums at M = 1 what it sums at M > 1). H200, fp16, M = 1, cold L2, against the
// fma2 kernel in one run (before the ones chain): q4g64 4096 x 22016 16.4 -> 15.8 µs, 4096
// x 4096 4.3 -> 4.1, but 4096 x 12288 10.0 -> 10.3 (8192 x 57344 85.8 -> 81.2 in an earlier
// build); q2g64 -4 to -15 %; llama2-7b q4g64 tg128 +1.8 %, llama3-8b +1.2 %. At 3, 6 and 8 bits it lost on the 4096-wide shapes (q8 llama2-7b
// tg128 -2.9 %), so they keep the fma2 path (kernels/qn/MEASURED.md has the sums' other
// placements that lost).
//
// What limits it: the q4 fp16 loop issued ~348 instructions a tile per warp (2.7 a weight;
// the SASS before x was staged, which took the kernel's 3640 -> 3112), 192 of them the
// dequantization (a lop3 and two fma2 per pair: exact, and the floor of this decoding), 16
// mmas, then permutes, loads and their addresses, at 16 warps an SM (128 registers a
// thread); the largest stall is long scoreboard (the x and scale loads of the
// dequantization chain), then fixed-latency dependencies. It is bound by issue and
// latency, not by bytes in flight: 92 % of the copy bandwidth at q4g64 8192 x 57344 on the
// H100, 56-77 % on the 4096-wide Llama shapes on an H200 (raw codes, 2026-11-29), whose
// grids are one to three waves of short blocks. Register and shared-memory rings, TMA
// copies, stream-K, blocks looping over row blocks, int8 activations, fp16 accumulation, 96
// registers, folded scales and L2 prefetches were each built, measured and dropped
// (kernels/qn/MEASURED.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/device_util.cuh"
#include "kernels/pdl.cuh"
#include "kernels/qn/gemv_qn.h"
#include "kernels/qn/qn_decode.cuh"
#include "kernels/qn/qn_format.h"

namespace gemlite {
namespace {

// Which staged-x (M = 1) kernels run on raw codes (the header): fp16 at 2 and 4 bits, where
// it won (kernels/qn/MEASURED.md; 3, 6 and 8 bits lost on the 4096-wide shapes, 1 bit
// spilled). The launch reads it too: such weights stage x only with groups of >= 64 k.
__host__ __device__ constexpr bool qn_raw_codes(int bits, bool bf16, bool sparse) {
  return !bf16 && !sparse && (bits == 2 || bits == 4);
}

constexpr int kRowsPerBlock = 16;  // the m of the mma
constexpr int kMaxWarps = 16;
// XROWS, the activation rows a kernel takes: kGemvMaxM (weights as the mma's A) or
// kGemvQnMaxRows (activations as A, compute_chunk); LaneInputs and ChunkInputs hold
// XROWS / 8 activation rows per lane.
static_assert(kGemvMaxM == 8 && kGemvQnMaxRows == 16, "XROWS is 8 or 16");
// The 16-row kernel keeps twice the partial sums per warp: at most 8 warps, so that its
// `partial` array stays the 8 KB of the 8-row kernel (see kScaleSlabDefaultBytes).
template <int XROWS>
constexpr int kMaxWarpsOf = XROWS == kGemvMaxM ? kMaxWarps : kMaxWarps / 2;
// The slab of scale/bias pairs a block stages in shared memory, [n_groups, 16 rows] pairs:
// up to 32 KB (with the kernel's static 8.7 KB, 9.1 KB with 16 rows) it stays under the 48
// KB that needs no opt-in, and four blocks of 4 warps an SM (the register limit) keep ~65
// KB of L1 for x on the H100 (five blocks of 3 warps, ~25 KB; the launch counts the blocks
// that fit, resident_blocks in gemv_qn.cu); larger slabs take the opt-in
// (gemv_qn_allow_shared_memory).
constexpr size_t kScaleSlabDefaultBytes = 32 << 10;
constexpr size_t kStaticSharedBound = 10 << 10;  // the kernels' static shared memory, rounded up
constexpr size_t kDefaultSharedBytes = 48 << 10;  // a block's shared memory without the opt-in

struct GemvQnParams {
  const uint32_t* qweight;     // [N16 / 16, Kw / 32, 512] tiles (qn_tile_word_index)
  const uint32_t* scale_bias;  // [n_groups, N16 / 16, 8, 2] {scale, -zero*scale}, see QnDeviceWeight
  const float* bias;           // [N] or null
  const uint16_t* x;           // [M, K] fp16/bf16 bits
  uint16_t* y;                 // [M, N]
  int64_t N, Kw;
  int K, n_groups;  // K <= 2^31 - 1024 (checked at upload): k block arithmetic reaches K + 32 E - 1
  uint32_t sb_group_stride;  // N16 / 2: uint2 pairs of scale_bias per group
  int group_shift;
  int M;
  bool x_vectorized;  // K % 8 == 0 and x 16-byte aligned: a block's B fragments are one 16-byte load
  int64_t paired_half;  // QnDeviceWeight::paired_half: 0, or block b = gate and up rows of [8b, 8b + 8)
  bool swiglu;          // y [M, paired_half] = silu(gate) * up instead of y [M, N]
  QnPendingNorm norm;   // sum_squares set: outputs scaled by rsqrt(Σ sum_squares[m] / K + eps)
  // gemv_qn_residual (paired_half == 0, !swiglu): residual [M, N] += x · Wᵀ, y = the new
  // residual ∘ norm_weight [N], sum_squares [M, gridDim.x] = Σ of its squares per block.
  uint16_t* residual;
  const float* norm_weight;
  float* sum_squares;
};

// ---- loads and the mma (the decoding is kernels/qn/qn_decode.cuh) ---------------------

__device__ __forceinline__ uint4 load_streaming(const uint32_t* p) {  // 16 bytes, read once
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// What a lane needs besides its words: its activation rows (gid, and gid + 8 in the 16-row
// kernel) and its two block rows' scale/bias pairs. Lanes whose m >= M read row 0 and rows
// past N read row N - 1: an mma output element depends only on its own row of A and column
// of B, so those lanes produce garbage only in outputs that are never stored, and need no
// masking.
// XS (one activation row, M = 1): the block has staged x in shared memory (x_shared), zero
// past K to the last tile's end, and every load of x reads it there.
template <int XROWS, bool XS = false>
struct LaneInputs {
  // [xh]: activation row gid + 8 xh.
  const uint16_t* x_row[XROWS / 8];   // [K]
  const uint16_t* x_lane[XROWS / 8];  // x_row + 8 tig: the lane's first activation of each 32-k block
  uint32_t x_shared;  // XS: the shared-memory address of x_lane[0]'s element (16 tig bytes into x)
  // Group 0's {row gid, row gid + 8} pair: this shared-memory address of the block's slab
  // (group g at + 64 g bytes).
  uint32_t sb_slab;
  uint32_t magic;  // CodeLayout::magic() (0: raw codes), opaque to the compiler so that it stays in one register
  uint32_t x_pieces;  // raw codes summing x by warp (raw_tile_sums): the staged x's first 16-byte piece, in shared memory
};

// What one chunk of JC k blocks needs besides the words: scale/bias per row and block, and
// the 8-byte x fragments per block and chunk c.
template <int JC, int XROWS>
struct ChunkInputs {
  uint32_t sb[JC][2];
  uint2 xb[XROWS / 8][JC][2];  // [xh][block][c]: activation row gid + 8 xh
};

// Loads the inputs of the chunk starting at k block b0 (JC blocks): its scale/bias pairs
// (load_chunk_scales: weights, which a PDL launch may read before its wait) and its x
// fragments (load_chunk_x).
// Loads carry no branches, so all of them are in flight together (the first version
// loaded next to each use, behind branches, and ran at ~40 % of copy). FULL: the chunk
// lies below K (decided once per tile in the kernel's loop, per chunk in last_tile);
// otherwise groups are clamped and x is zero for k >= K.
template <int JC, bool FULL, int CAP, int XROWS, bool XS>
__device__ __forceinline__ void load_chunk_scales(const GemvQnParams& p, const LaneInputs<XROWS, XS>& in, int b0,
                                                  ChunkInputs<CAP, XROWS>& ci) {
  static_assert(JC <= CAP, "chunk larger than its buffer");
#pragma unroll
  for (int j = 0; j < JC; ++j) {
    const int g = FULL ? (b0 + j) >> p.group_shift : min((b0 + j) >> p.group_shift, p.n_groups - 1);
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(in.sb_slab + 64u * uint32_t(g)));
    ci.sb[j][0] = v.x;
    ci.sb[j][1] = v.y;
  }
}

// The lane's x of a chunk lying below K, whose first block is at x[xh] (x_lane + 32 b0):
// callers that pass a tile's base plus a constant let the compiler fold the chunk's offset
// into the loads' immediate offsets. load_chunk_x's own below-K path is the same loads from
// x_lane + 32 b0; routed through this function it changed every kernel's code (sm_90a SASS,
// q4 fp16 8-row 3640 -> 3696 instructions, other kernels' spills moved), so both stay.
template <int JC, int CAP, int XROWS>
__device__ __forceinline__ void load_chunk_x_below_k(const GemvQnParams& p, const uint16_t* const (&x_at)[XROWS / 8],
                                                     ChunkInputs<CAP, XROWS>& ci) {
  static_assert(JC <= CAP, "chunk larger than its buffer");
#pragma unroll
  for (int xh = 0; xh < XROWS / 8; ++xh) {
    const uint16_t* x = x_at[xh];  // + 32 j + 4 c + i: k
    auto& xb = ci.xb[xh];
    if (p.x_vectorized) {
#pragma unroll
      for (int j = 0; j < JC; ++j) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + 32 * j));
        xb[j][0] = make_uint2(v.x, v.y);
        xb[j][1] = make_uint2(v.z, v.w);
      }
    } else {
#pragma unroll
      for (int j = 0; j < JC; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const uint16_t* e = x + 32 * j + 4 * c;
          xb[j][c] = make_uint2(__ldg(e) | uint32_t(__ldg(e + 1)) << 16, __ldg(e + 2) | uint32_t(__ldg(e + 3)) << 16);
        }
    }
  }
}

template <int XROWS>
struct LaneX {  // a pointer per activation row of the lane: x_lane + 32 b for some block b
  const uint16_t* at[XROWS / 8];
};
template <int XROWS, bool XS>
__device__ __forceinline__ LaneX<XROWS> lane_x_at(const LaneInputs<XROWS, XS>& in, int block32) {
  LaneX<XROWS> x;
#pragma unroll
  for (int xh = 0; xh < XROWS / 8; ++xh) x.at[xh] = in.x_lane[xh] + int64_t(block32) * 32;
  return x;
}
template <int XROWS>
__device__ __forceinline__ LaneX<XROWS> offset_by(const LaneX<XROWS>& base, int elements) {
  LaneX<XROWS> x;
#pragma unroll
  for (int xh = 0; xh < XROWS / 8; ++xh) x.at[xh] = base.at[xh] + elements;
  return x;
}

template <int JC, bool FULL, int CAP, int XROWS, bool XS>
__device__ __forceinline__ void load_chunk_x(const GemvQnParams& p, const LaneInputs<XROWS, XS>& in, int b0,
                                             ChunkInputs<CAP, XROWS>& ci) {
  static_assert(JC <= CAP, "chunk larger than its buffer");
  if constexpr (XS) {  // x staged in shared memory, zeros past K: one 16-byte load a block, 64 bytes apart
#pragma unroll
    for (int j = 0; j < JC; ++j) {
      uint4 v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(in.x_shared + 64u * uint32_t(b0 + j)));
      ci.xb[0][j][0] = make_uint2(v.x, v.y);
      ci.xb[0][j][1] = make_uint2(v.z, v.w);
    }
  } else {
#pragma unroll
    for (int xh = 0; xh < XROWS / 8; ++xh) {
      const uint16_t* x = in.x_lane[xh] + uint32_t(b0) * 32u;  // + 32 j + 4 c + i: k
      auto& xb = ci.xb[xh];
      if (FULL && p.x_vectorized) {
#pragma unroll
        for (int j = 0; j < JC; ++j) {
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + 32 * j));
          xb[j][0] = make_uint2(v.x, v.y);
          xb[j][1] = make_uint2(v.z, v.w);
        }
      } else if (FULL) {
#pragma unroll
        for (int j = 0; j < JC; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const uint16_t* e = x + 32 * j + 4 * c;
            xb[j][c] =
                make_uint2(__ldg(e) | uint32_t(__ldg(e + 1)) << 16, __ldg(e + 2) | uint32_t(__ldg(e + 3)) << 16);
          }
      } else {  // the chunk reaching past K: x zero for k >= K
        const int k0 = b0 * 32 + 8 * (threadIdx.x % 4);
#pragma unroll
        for (int j = 0; j < JC; ++j) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int k = k0 + 32 * j + 4 * c;
            uint32_t e[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const uint32_t v = __ldg(in.x_row[xh] + min(k + i, p.K - 1));
              e[i] = k + i < p.K ? v : 0u;
            }
            xb[j][c] = make_uint2(e[0] | e[1] << 16, e[2] | e[3] << 16);
          }
        }
      }
    }
  }
}

template <int JC, bool FULL, int CAP, int XROWS, bool XS>
__device__ __forceinline__ void load_chunk_inputs(const GemvQnParams& p, const LaneInputs<XROWS, XS>& in, int b0,
                                                  ChunkInputs<CAP, XROWS>& ci) {
  load_chunk_scales<JC, FULL>(p, in, b0, ci);
  load_chunk_x<JC, FULL>(p, in, b0, ci);
}

// Blocks J0 .. J0 + JC - 1 of a tile. Block = code for qN; for s7 blocks 2 J and 2 J + 1
// are the first and second elements of the pairs in code J.
// XROWS = 8: the weights are the mma's A (16 rows) and x its B (8 activation rows), 2 JC
// mmas into acc[c] (two chains). XROWS = 16 (M > kGemvMaxM): the other way round, x is A
// (16 activation rows: a0 / a2 = row gid's {k, k+1} / {k+2, k+3}, a1 / a3 those of row
// gid + 8) and the weights are B of two n = 8 mmas: column gid of B takes block row gid's
// two pairs (the registers that are a0 and a2 of the 8-row kernel) for rows 0..7 into
// acc[0], and block row gid + 8's (a1, a3 there) for rows 8..15 into acc[1]: 4 JC mmas,
// each accumulator a chain of 2 JC, the same dequantization for twice the rows.
template <int BITS, bool BF16, bool SPARSE, int J0, int JC, int CAP, int XROWS, bool XS>
__device__ __forceinline__ void compute_chunk(const LaneInputs<XROWS, XS>& in, const WordPair (&words)[2][2][2],
                                              const ChunkInputs<CAP, XROWS>& ci, float (&acc)[2][4]) {
  static_for<0, JC>([&](auto jj) {
    constexpr int B = J0 + decltype(jj)::value, j = decltype(jj)::value;
    constexpr int J = SPARSE ? B / 2 : B, H = SPARSE ? B % 2 : 0;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      // w(r, u) = the weight pair of block row gid + 8 r, words u of the chunk's four.
      const auto w = [&](int r, int u) {
        return weight_pair<BITS, BF16, J, SPARSE, H>(words[r][c][u], ci.sb[j][r], in.magic);
      };
      if constexpr (XROWS == kGemvMaxM) {
        mma_16816<BF16>(acc[c], w(0, 0), w(1, 0), w(0, 1), w(1, 1), ci.xb[0][j][c].x, ci.xb[0][j][c].y);
      } else {
        const uint32_t lo0 = w(0, 0), hi0 = w(1, 0), lo1 = w(0, 1), hi1 = w(1, 1);
        const uint2 x_lo = ci.xb[0][j][c], x_hi = ci.xb[1][j][c];
        mma_16816<BF16>(acc[0], x_lo.x, x_hi.x, x_lo.y, x_hi.y, lo0, lo1);
        mma_16816<BF16>(acc[1], x_lo.x, x_hi.x, x_lo.y, x_hi.y, hi0, hi1);
      }
    }
  });
}

// 32-k blocks per tile: one per code of a word (qN), two per pair byte (s7).
template <int BITS, bool SPARSE>
constexpr int kTileBlocks = SPARSE ? 2 * (32 / BITS) : 32 / BITS;

__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}


// Pulls tile t's x lines into L1 a tile ahead, so that tile_chunk's loads hit.
template <int BITS, bool SPARSE, int XROWS, bool XS>
__device__ __forceinline__ void prefetch_tile_x(const GemvQnParams& p, const LaneInputs<XROWS, XS>& in, int t,
                                                int lane) {
  if constexpr (!XS) {  // staged x is in shared memory already
    constexpr int E = kTileBlocks<BITS, SPARSE>;
    const int first = t * E;  // k block
    // The lanes of activation row gid + 8 xh (all of them read row 0 where that is >= M)
    // share the 128-byte lines covering its 32 E halves at any alignment.
    constexpr int kLines = E / 2 + 1;
#pragma unroll
    for (int xh = 0; xh < XROWS / 8; ++xh)
#pragma unroll
      for (int line = lane % 4; line < kLines; line += 4)
        prefetch_l1(in.x_row[xh] + min(first * 32 + line * 64, p.K - 1));
  }
}

// Blocks per chunk: 2, and the inputs of the next chunk (or of the next tile's first) are
// loaded while this one is computed. ncu on q4g64 8192 x 57344 (one chunk of 4 blocks,
// loaded then computed): 39 % of warp stall samples on long scoreboard, IPC 2.2, the loop
// bound by latency with 16 warps per SM. Two chunk buffers of 2 blocks take the registers
// that one of 4 took. (Buffers of 4 spilled 52-80 bytes at 1..3 bits.)
constexpr int kChunkBlocks = 2;

template <int E>
constexpr int kChunks = (E + kChunkBlocks - 1) / kChunkBlocks;
template <int E>
constexpr int kFirstChunkBlocks = E < kChunkBlocks ? E : kChunkBlocks;

// ---- raw codes: the staged-x fp16 kernel of 2 and 4 bits (see the header) ---------------

template <int BITS, bool BF16, bool SPARSE, bool XS>
constexpr bool kRawCodes = XS && qn_raw_codes(BITS, BF16, SPARSE);
// A chunk (two 32-k blocks, starting at an even block: 8 and 16 blocks a tile) lies in one
// group (the launch stages x for groups of >= 64 k only), so its sums take one {scale,
// bias} pair and one Σ x.
constexpr int kRawChunkPieces = 4 * kChunkBlocks;  // 16-byte pieces of x in a chunk
template <int E>
constexpr int kRawSumRounds = (4 * E + 31) / 32;  // a tile's pieces of x, one a lane a round
// Where a chunk's Σ x comes from. At 4 bits a third mma chain, A = ones, gives Σ x in every
// row (exact products, fp32 sums): 4 mmas a chunk in place of the tile's sums below. One
// H200, fp16, M = 1, cold L2, before / after in one run, µs: q4g64 14336 x 4096 10.2 -> 9.4
// (+8 %), 4096 x 14336 11.0 -> 10.4, 11008 x 4096 8.4 -> 8.0, 8192 x 8192 11.2 -> 10.7,
// 8192 x 10240 14.2 -> 13.5, 4096 x 4096 4.0 -> 4.1 (-1.5 %), K >= 28672 equal; llama3-8b
// q4g64 tg128 644.6 / 648.7 -> 677.8 / 678.7 tok/s (+4.8 %), llama2-7b 693.6 / 697.0 ->
// 701.1 / 700.1 (+0.8 %; kernels/qn/MEASURED.md). At 2 bits (twice the chunks a tile) the
// chain made the kernel spill 156 bytes and run 15-25 % slower, so its warps sum each
// tile's x from the staged copy (raw_tile_sums).
template <int BITS>
constexpr bool kRawSumsByMma = BITS == 4;
constexpr uint32_t kOnesPair = 0x3C003C00u;  // fp16 {1, 1}

// The units of the accumulators in a raw-code kernel: where the tile's sums give Σ x, 2^-24
// of the outputs (the kernel scales them after the loop); where the mma chain does, the
// outputs' own (both measured fastest so: the 4-bit kernel in 2^-24 units, its chain's A
// the subnormal 2^-24, ran llama3-8b q4g64 tg128 2 % slower and spilled 20 bytes more; the
// 2-bit kernel in output units lost 1 %).
template <int BITS>
constexpr float kRawAccUnit = kRawSumsByMma<BITS> ? 1.0f : 0x1p-24f;

// 2^-24 Σ x of each chunk of a tile: chunk h in round h / 4, on the 8 lanes from 8 (h % 4).
template <int E>
struct RawTileSums {
  float round[kRawSumRounds<E>];
};

// Tile t's sums from the staged x: each lane adds one 16-byte piece a round, the chunk's
// 8 lanes by a butterfly, all in fp32. (Pairs first added in fp16 failed the GemvQn tests
// at q8 per channel, when raw codes ran every width: its bias -z s, z ~ 128, multiplies
// the error of Σ x.)
template <int BITS>
__device__ __forceinline__ RawTileSums<kTileBlocks<BITS, false>> raw_tile_sums(uint32_t x_pieces, int t, int lane) {
  constexpr int E = kTileBlocks<BITS, false>;
  RawTileSums<E> sums;
#pragma unroll
  for (int r = 0; r < kRawSumRounds<E>; ++r) {
    const int piece = 32 * r + lane;  // of the tile
    float sum = 0;
    if (piece < 4 * E) {
      uint4 v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(x_pieces + 16u * uint32_t(4 * E * t + piece)));
      const float2 a = __half22float2(as_pair<false>(v.x)), b = __half22float2(as_pair<false>(v.y));
      const float2 c = __half22float2(as_pair<false>(v.z)), e = __half22float2(as_pair<false>(v.w));
      sum = ((a.x + a.y) + (b.x + b.y)) + ((c.x + c.y) + (e.x + e.y));
    }
#pragma unroll
    for (int o = 1; o < kRawChunkPieces; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    sums.round[r] = sum * 0x1p-24f;
  }
  return sums;
}

// Raw codes: chunk h's mmas (8-row kernel, M = 1) on the codes as fp16 subnormals,
// 2^(offset - 24) q (code_bits with magic 0, exact), a fresh chain per block b, d[b] =
// 2^(offset_b - 24) Σ q x; then, with the group's pair in fp32, acc += scale Σ_b
// 2^(24 - offset_b) d[b] + bias Σ x, in kRawAccUnit: no weight is rounded to fp16. Applied
// as soon as the chunk's mmas are issued: one chunk later, the K = 4096 shapes had run 5-15
// % slower.
template <int BITS, int J0, int JC, int CAP>
__device__ __forceinline__ void compute_chunk_raw(const LaneInputs<kGemvMaxM, true>& in,
                                                  const WordPair (&words)[2][2][2],
                                                  const ChunkInputs<CAP, kGemvMaxM>& ci,
                                                  const RawTileSums<kTileBlocks<BITS, false>>& sums,
                                                  float (&acc)[2][4]) {
  using L = CodeLayout<BITS, false>;
  static_assert(JC == kChunkBlocks && J0 % kChunkBlocks == 0, "raw codes take whole chunks");
  constexpr int h = J0 / kChunkBlocks;  // the chunk of the tile
  float sum_x = 0;
  if constexpr (!kRawSumsByMma<BITS>)  // issued first: after the mmas, the 2-bit kernel ran 3-6 % slower
    sum_x = __shfl_sync(0xffffffffu, sums.round[h / 4], kRawChunkPieces * (h % 4));
  float d[kChunkBlocks][4] = {};
  float sums_by_mma[4] = {};  // kRawSumsByMma: every row's Σ x of activation rows 2tig, 2tig + 1
  static_for<0, kChunkBlocks>([&](auto bb) {
    constexpr int b = decltype(bb)::value, J = J0 + b;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const auto w = [&](int r, int v) { return code_bits<BITS, false, J, BITS>(words[r][c][v], in.magic); };
      mma_16816<false>(d[b], w(0, 0), w(1, 0), w(0, 1), w(1, 1), ci.xb[0][b][c].x, ci.xb[0][b][c].y);
      if constexpr (kRawSumsByMma<BITS>)
        mma_16816<false>(sums_by_mma, kOnesPair, kOnesPair, kOnesPair, kOnesPair, ci.xb[0][b][c].x, ci.xb[0][b][c].y);
    }
  });
  if constexpr (kRawSumsByMma<BITS>) sum_x = sums_by_mma[0];  // M = 1: lanes tig = 0 hold activation row 0
  constexpr float f0 = float(1 << (24 - L::offset(J0))) * kRawAccUnit<BITS>;
  constexpr float f1 = float(1 << (24 - L::offset(J0 + 1))) * kRawAccUnit<BITS>;
#pragma unroll
  for (int r = 0; r < 2; ++r) {  // block rows gid and gid + 8 of activation row 0: d[b][0], d[b][2]
    const float codes = fmaf(d[0][2 * r], f0, d[1][2 * r] * f1);
    const __half2 sb = as_pair<false>(ci.sb[0][r]);
    acc[0][2 * r] = fmaf(__low2float(sb), codes, acc[0][2 * r]);
    acc[1][2 * r] = fmaf(__high2float(sb), sum_x, acc[1][2 * r]);
  }
}

// The 16-row x 32E-column tile starting at 32-column block `block32`: 2E mmas (4E in the
// 16-row kernel) into acc. FULL: every k of the tile is below K; otherwise each chunk is checked: below K
// it takes the fast loads, across K the clamped ones, past K it is skipped.
// PRECOND: `a` holds the inputs of the tile's first chunk. POSTCOND: when next_block32 >= 0,
// `a` holds those of the tile starting there.
template <int BITS, bool BF16, bool SPARSE, bool FULL, int XROWS, bool XS>
__device__ __forceinline__ void tile_step(const GemvQnParams& p, const LaneInputs<XROWS, XS>& in,
                                          const uint4 (&words)[2][2], int block32, int next_block32,
                                          ChunkInputs<kChunkBlocks, XROWS>& a, ChunkInputs<kChunkBlocks, XROWS>& b,
                                          float (&acc)[2][4],
                                          const RawTileSums<kTileBlocks<BITS, SPARSE>>& raw_sums) {
  constexpr int E = kTileBlocks<BITS, SPARSE>, H = kChunks<E>;
  constexpr bool kRaw = kRawCodes<BITS, BF16, SPARSE, XS> && FULL;  // the tile reaching past K: fma2
  // [row r][chunk c][words {x, y} or {z, w} of the uint4]: A registers a0..a3 of an mma.
  WordPair pairs[2][2][2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      pairs[r][c][0] = word_pair(words[r][c].x, words[r][c].y);
      pairs[r][c][1] = word_pair(words[r][c].z, words[r][c].w);
    }
  // The tile's x base, once: each chunk's loads take it plus a constant (load_chunk_x_below_k),
  // where a 32-bit block offset per chunk had been rebuilt into a 64-bit address (q4 fp16
  // SASS 3696 -> 3640 instructions; H200: 0-2 % faster GEMVs, llama2-7b q4g64 tg128 +0.4 %,
  // kernels/qn/MEASURED.md). Only where it does not spill (ptxas, sm_90a): the 8-row kernels
  // but for 1 and 3 bits.
  constexpr bool kTileBase = !XS && XROWS == kGemvMaxM && BITS != 1 && BITS != 3;
  const LaneX<XROWS> x_tile = lane_x_at(in, kTileBase ? block32 : 0);
  static_for<0, H>([&](auto hh) {
    constexpr int h = decltype(hh)::value, J0 = h * kChunkBlocks;
    constexpr int JC = E - J0 < kChunkBlocks ? E - J0 : kChunkBlocks;
    ChunkInputs<kChunkBlocks, XROWS>& cur = h % 2 == 0 ? a : b;
    ChunkInputs<kChunkBlocks, XROWS>& other = h % 2 == 0 ? b : a;
    if constexpr (h + 1 < H) {
      constexpr int NJC = E - J0 - kChunkBlocks < kChunkBlocks ? E - J0 - kChunkBlocks : kChunkBlocks;
      constexpr int NJ0 = J0 + kChunkBlocks;
      if (FULL || (block32 + NJ0 + NJC) * 32 <= p.K) {
        load_chunk_scales<NJC, true>(p, in, block32 + NJ0, other);
        if constexpr (kTileBase)
          load_chunk_x_below_k<NJC>(p, offset_by(x_tile, NJ0 * 32).at, other);
        else
          load_chunk_x<NJC, true>(p, in, block32 + NJ0, other);
      } else if ((block32 + NJ0) * 32 < p.K) {
        load_chunk_inputs<NJC, false>(p, in, block32 + NJ0, other);
      }
    } else if (next_block32 >= 0) {  // the next tile lies below K as well
      load_chunk_inputs<kFirstChunkBlocks<E>, true>(p, in, next_block32, other);
    }
    // Past K (only when !FULL) the chunk adds nothing.
    if (FULL || (block32 + J0) * 32 < p.K) {
      if constexpr (kRaw)
        compute_chunk_raw<BITS, J0, JC>(in, pairs, cur, raw_sums, acc);
      else
        compute_chunk<BITS, BF16, SPARSE, J0, JC>(in, pairs, cur, acc);
    }
  });
  if constexpr (H % 2 == 1) {
    if (next_block32 >= 0) a = b;  // the next tile's first chunk landed in b
  }
}

// Tile t of the lane's row block (`block_words`: its first tile + 4 lane): words[h][c] =
// the lane's 4 words of chunk c of block row gid + 8 h, each load 512 contiguous bytes
// across the warp (qn_tile_word_index).
__device__ __forceinline__ void load_tile(const uint32_t* block_words, int t, uint4 (&words)[2][2]) {
  const uint32_t* w = block_words + uint32_t(t) * 512u;
#pragma unroll
  for (int c = 0; c < 2; ++c)
#pragma unroll
    for (int h = 0; h < 2; ++h) words[h][c] = load_streaming(w + (2 * c + h) * 128);
}

// The accumulators and a tile's words by value: arrays passed by reference to an out-of-line
// function would live in local memory.
struct Accumulators {
  float v[2][4];
};
struct TileWords {
  uint4 v[2][2];  // as load_tile loads them
};

// The last tile t of a row block, reaching past K (its words loaded), added to `sum`. Out
// of line: inlined into the kernel's loop, its slow path made the loop spill at 128
// registers (the staged 2- and 3-bit fp16 kernels run it inline: kInlineLastTile). XS: x
// from the staged copy, zero past K up to the tile's end, as in the loop (it had read x
// from global memory, clamped: one H200, fp16, M = 1, A/B in one run, µs, q6g64 4096 x
// 12288 15.7 -> 15.2, 4096 x 22016 23.7 -> 23.1; llama2-7b q6g64 tg128 +2.1 %;
// kernels/qn/MEASURED.md).
template <int BITS, bool BF16, bool SPARSE, int XROWS, bool XS>
__device__ __noinline__ Accumulators last_tile(const GemvQnParams& p, const LaneInputs<XROWS, XS> in,
                                               const TileWords words, int t, Accumulators sum) {
  constexpr int E = kTileBlocks<BITS, SPARSE>;
  ChunkInputs<kChunkBlocks, XROWS> inputs_a, inputs_b;
  if ((t * E + kFirstChunkBlocks<E>) * 32 <= p.K)
    load_chunk_inputs<kFirstChunkBlocks<E>, true>(p, in, t * E, inputs_a);
  else
    load_chunk_inputs<kFirstChunkBlocks<E>, false>(p, in, t * E, inputs_a);
  const RawTileSums<E> no_sums{};  // tile_step<FULL = false> decodes fma2, no raw sums
  tile_step<BITS, BF16, SPARSE, false>(p, in, words.v, t * E, -1, inputs_a, inputs_b, sum.v, no_sums);
  return sum;
}

// W (tiles of qN codes, qn_tile_word_index), x [M, K] -> y [M, N] (p.swiglu: y [M, N / 2] = silu(gate) * up).
// XROWS: the activation rows one launch can take, p.M <= XROWS (8: weights as the mma's A;
// 16: x as A, see compute_chunk).
// PRECOND: blockDim.x = 32 * warps with warps <= kMaxWarpsOf<XROWS>, grid.x = ceil(N / 16),
// K <= 2^31 - 1024; p.paired_half = 0, or N = 2 * p.paired_half with p.paired_half % 8 == 0.
// XS (XROWS = 8, M = 1, p.x_vectorized): x staged in shared memory after the scale slab.
template <int BITS, bool BF16, bool SPARSE, int XROWS, bool XS>
__global__ void __launch_bounds__(kMaxWarps * 32) gemv_qn_kernel(const __grid_constant__ GemvQnParams p) {
  static_assert(!XS || XROWS == kGemvMaxM, "x is staged for the 8-row kernel only");
  constexpr int E = kTileBlocks<BITS, SPARSE>;
  constexpr bool RAW = kRawCodes<BITS, BF16, SPARSE, XS>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int gid = lane / 4, tig = lane % 4;
  const int64_t row_base = int64_t(blockIdx.x) * kRowsPerBlock;  // block rows (scale_bias)
  const uint32_t* block_words = p.qweight + row_base * p.Kw + 4 * lane;  // the block's tiles, + lane
  LaneInputs<XROWS, XS> in;
#pragma unroll
  for (int xh = 0; xh < XROWS / 8; ++xh) {
    const int m = gid + 8 * xh;
    in.x_row[xh] = p.x + (m < p.M ? int64_t(m) * p.K : 0);
    in.x_lane[xh] = in.x_row[xh] + 8 * tig;
  }
  // [n_groups, 4]: the block's 16 rows' pairs of each group, 64 bytes (gemv_qn_scale_slab_bytes).
  extern __shared__ uint4 scale_slab[];
  in.sb_slab = uint32_t(__cvta_generic_to_shared(scale_slab)) + 8u * uint32_t(gid);
  // XS: [tiles * 4 E] 16-byte pieces of x row 0, zeros past K (the last tile's end).
  uint4* x_stage = scale_slab + 4 * p.n_groups;
  in.x_pieces = uint32_t(__cvta_generic_to_shared(x_stage));
  in.x_shared = in.x_pieces + 16u * uint32_t(tig);
  asm volatile("mov.b32 %0, %1;" : "=r"(in.magic) : "n"(RAW ? 0u : CodeLayout<BITS, BF16>::magic()));
  const int tiles = int(p.Kw / 32);

  // The next tile's four 16-byte loads stay in flight while this one is dequantized.
  // Deeper pipelines did not pay: a cp.async ring per warp of 2..5 tiles in shared memory
  // ran 5-8 % slower at 2 stages and slower still with more (less L1 left for the scale
  // and x lines), so did a ring of bulk (TMA) copies on the tile layout (kernels/qn/MEASURED.md), L2
  // prefetches of later tiles cost 5-15 %, and a register ring two tiles deep (unrolled,
  // no moves) ran 13 % slower at q4g64 8192 x 57344 (74.1 -> 64.0 % of copy; it spills at
  // 128 registers): the loop is bound by its instructions and their latencies, not by
  // bytes in flight.
  // Two chains: c = 0, 1 (halving the mma dependency chain), or in the 16-row kernel the
  // block rows 0..7 and 8..15.
  float acc[2][4] = {};
  uint4 words_a[2][2], words_b[2][2];  // the tile being computed and the next, in turn
  ChunkInputs<kChunkBlocks, XROWS> inputs_a, inputs_b;
  // Tiles [0, full_tiles) lie below K; at most one more (the last) reaches past it.
  const int full_tiles = p.K / (32 * E);

  // PDL (kernels/pdl.cuh): launched while the kernel before it runs, the block loads what
  // does not depend on it (its first tile of W) and only then waits for x; the next kernel
  // may start as soon as all blocks run, its blocks taking the SMs ours free. With
  // gemm_fpx and gemv_dense doing the same: llama2-7b q4g64 tg128 242.7 -> 249.7 tok/s
  // (kernels/pdl.cuh has the command and the other formats); pulling the block's whole
  // slice of W into L2 here as well made it slower (237.4).
  // The block's scale/bias pairs are weights too: fetched before the wait, so that their
  // DRAM latency no longer follows it (A/B on one machine, fp16 M = 1, two rounds:
  // q4g64 4096 x 4096 5.9 -> 5.7-5.8 us, 11008 x 4096 12.1 -> 11.8, q8 4096 x 4096 7.6 ->
  // 7.3, 4096 x 12288 20.2-20.5 -> 19.9, the long-K shapes unchanged; llama2-7b q4g64
  // tg128 448.8 / 451.2 -> 452.3 / 452.3 tok/s). A warp's second tile before the wait as
  // well measured no faster (kernels/qn/MEASURED.md, 2026-11-27).
  pdl_launch_dependents();
  if (warp < tiles) load_tile(block_words, warp, words_a);
  const uint4* block_pairs = reinterpret_cast<const uint4*>(p.scale_bias + row_base);  // + 2 stride g: group g
  for (int i = threadIdx.x; i < 4 * p.n_groups; i += blockDim.x)
    cp_async16(&scale_slab[i], block_pairs + int64_t(i / 4) * (p.sb_group_stride / 2) + i % 4);
  cp_async_commit();
  // The residual epilogue's thread stores rows r = threadIdx.x % 16 (blockDim.x % 32 == 0):
  // its norm weight, not written by any kernel, is fetched now rather than after the loop.
  const int64_t norm_row = min(row_base + threadIdx.x % kRowsPerBlock, p.N - 1);
  const float norm_weight = p.residual ? p.norm_weight[norm_row] : 0.0f;
  pdl_wait();
  if constexpr (XS) {
    // Every resident block copies the same x right after the wait, on the critical path: the
    // copy goes through L1 (.ca), so an SM's blocks fetch each line from L2 once. A/B in one
    // run on an H200 (fp16, M = 1, cold L2, .cg -> .ca): q4g64 4096 x 4096 5.0 -> 4.3 µs,
    // 4096 x 6144 7.6 -> 6.2, 4096 x 28672 23.0 -> 20.6, 14336 x 4096 11.7 -> 10.1; q4g64
    // tg128 llama3-8b 556.4 -> 615.2, llama2-7b 585.9 -> 616.9 tok/s (kernels/qn/MEASURED.md).
    const uint4* x16 = reinterpret_cast<const uint4*>(p.x);
    for (int i = threadIdx.x; i < p.K / 8; i += blockDim.x) cp_async16_ca(&x_stage[i], x16 + i);
    for (int i = p.K / 8 + threadIdx.x; i < tiles * 4 * E; i += blockDim.x) x_stage[i] = make_uint4(0, 0, 0, 0);
    cp_async_commit();
  }
  // A pending norm's parts are ready now: at M = 1 warp 0 loads them beside the copy of x,
  // one L2 round trip for both, instead of after the loop on every block's way out. A/B on
  // one H200, interleaved (q4g64 tg128, `--synthetic MODEL -p 0 -n 128 -c 128 -r 2`):
  // llama3-8b 608.1 / 609.2 -> 621.5 / 614.0 tok/s, llama2-7b 617.9 -> 627.4. XS only: the
  // other kernels sit at 128 registers and spilled 8-12 bytes more with it. Warp 0 also
  // turns them into r_0 here, before the block's barrier, where the x copy's wait hides the
  // butterfly and the rsqrt that had followed the loop on the way to the outputs (one H200,
  // fp16, q4g64 with the norm epilogue, GEMLITE_BENCH_EPILOGUE=norm,swiglu: 4096 x 12288 10.8
  // -> 10.6 µs, gate/up's 4096 x 22016 pair 16.9 -> 16.6-16.7; q8 within 0.1).
  __shared__ float inv_rms[XROWS];  // r_m of a pending norm
  constexpr int kEarlyNormLoads = 16;  // parts of producers up to 512 blocks (N <= 8192)
  const bool norm_early = XS && p.norm.sum_squares && p.norm.parts <= 32 * kEarlyNormLoads;  // XS: M = 1, r_0 is all
  if constexpr (XS) {
    if (norm_early && warp == 0) {
      const float r = inv_rms_of_lane_sums(
          pending_norm_lane_sum_unrolled<kEarlyNormLoads>(p.norm.sum_squares, p.norm.parts), p.K, p.norm.eps);
      if (lane == 0) inv_rms[0] = r;
    }
  }
  // The residual element the epilogue's thread r < 16 adds to (o and down) is ready too:
  // loaded now with them. With gemm_fpx's early epilogue loads, A/B on one H200, q4g64
  // tg128: tinyllama-1.1b +2.0 % and +3.8 % (two runs), llama2-7b +1.2 % (kernels/qn/MEASURED.md).
  const bool residual_early = XS && p.residual && threadIdx.x < kRowsPerBlock;
  const uint16_t early_residual = residual_early ? p.residual[norm_row] : uint16_t(0);
  cp_async_wait<0>();
  __syncthreads();
  RawTileSums<E> raw_sums{};  // raw codes: tile t's, computed a tile ahead
  if constexpr (RAW && !kRawSumsByMma<BITS>) {
    if (warp < full_tiles) raw_sums = raw_tile_sums<BITS>(in.x_pieces, warp, lane);
  }
  if (warp < full_tiles) {
    load_chunk_scales<kFirstChunkBlocks<E>, true>(p, in, warp * E, inputs_a);
    prefetch_tile_x<BITS, SPARSE>(p, in, warp, lane);
    load_chunk_x<kFirstChunkBlocks<E>, true>(p, in, warp * E, inputs_a);
  }
  // Each step loads the next tile's words (and, below K, its inputs) while it computes
  // tile t < full_tiles. The loop is unrolled twice so that the two word buffers swap roles
  // without copies (a loop of one step copied the next tile's 16 registers with 16 SELs a
  // tile, 3 % of its instructions).
  const auto full_step = [&](const uint4(&cur)[2][2], uint4(&next)[2][2], int t) {
    const int t_next = t + warps;
    if (t_next < tiles) load_tile(block_words, t_next, next);
    const bool next_full = t_next < full_tiles;
    if (next_full) prefetch_tile_x<BITS, SPARSE>(p, in, t_next, lane);
    RawTileSums<E> next_sums{};
    if constexpr (RAW && !kRawSumsByMma<BITS>) {
      if (next_full) next_sums = raw_tile_sums<BITS>(in.x_pieces, t_next, lane);
    }
    tile_step<BITS, BF16, SPARSE, true>(p, in, cur, t * E, next_full ? t_next * E : -1, inputs_a, inputs_b, acc,
                                        raw_sums);
    if constexpr (RAW) raw_sums = next_sums;
  };
  int t = warp;
  bool in_b = false;  // tile t's words are in words_b
  for (; t < full_tiles; t += warps) {
    full_step(words_a, words_b, t);
    t += warps;
    if (t >= full_tiles) {
      in_b = true;
      break;
    }
    full_step(words_b, words_a, t);
  }
  if constexpr (RAW && kRawAccUnit<BITS> != 1.0f) {  // to the outputs' units
#pragma unroll
    for (int c = 0; c < 2; ++c)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[c][i] *= 1.0f / kRawAccUnit<BITS>;
  }
  // The tile reaching past K (t == full_tiles), inline in the staged fp16 2- and 3-bit
  // kernels, out of line (last_tile) in the others. Inline, one H200, fp16, M = 1, A/B in one
  // run: q3g64 4096 x 12288 11.5 -> 10.9 µs, 4096 x 22016 18.5 -> 17.6, 28672 x 8192 37.5 ->
  // 36.8; q2g64 11008 x 4096 7.5 -> 7.0 (llama2-7b q2g64 tg128 +2.3 %); but q5g64 4-12 %
  // slower everywhere and q6g64 mixed; q4g64 not tried (no model K leaves it a partial
  // tile); bf16 not measured (kernels/qn/MEASURED.md).
  constexpr bool kInlineLastTile = XS && !BF16 && (BITS == 3 || BITS == 2);
  // The fma2 path even in a raw-code kernel (tile_step's kRaw), so that a row shorter than
  // a tile (stories260K's dim of 64) sums at M = 1 what it sums at M > 1.
  LaneInputs<XROWS, XS> fma2 = in;
  asm volatile("mov.b32 %0, %1;" : "=r"(fma2.magic) : "n"(CodeLayout<BITS, BF16>::magic()));
  if constexpr (kInlineLastTile) {
    if (t < tiles) {
      uint4 words[2][2];
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < 2; ++c) words[r][c] = in_b ? words_b[r][c] : words_a[r][c];
      load_chunk_inputs<kFirstChunkBlocks<E>, false>(p, fma2, t * E, inputs_a);
      tile_step<BITS, BF16, SPARSE, false>(p, fma2, words, t * E, -1, inputs_a, inputs_b, acc, raw_sums);
    }
  } else if (t < tiles) {
    TileWords words;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < 2; ++c) words.v[r][c] = in_b ? words_b[r][c] : words_a[r][c];
    Accumulators sum;
#pragma unroll
    for (int c = 0; c < 2; ++c)
#pragma unroll
      for (int i = 0; i < 4; ++i) sum.v[c][i] = acc[c][i];
    sum = last_tile<BITS, BF16, SPARSE, XROWS, XS>(p, fma2, words, t, sum);
#pragma unroll
    for (int c = 0; c < 2; ++c)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[c][i] = sum.v[c][i];
  }

  // XROWS = 8, C fragment: acc[c][0..1] = block row gid, activation rows (m) 2tig, 2tig+1;
  // acc[c][2..3] = block row gid + 8; the two chains c summed. XROWS = 16: acc[h] holds block
  // rows 8 h + 2tig, 8 h + 2tig + 1 (elements 0, 1 and 2, 3) of activation row gid (0, 1)
  // and gid + 8 (2, 3).
  constexpr int kPartials = XROWS == kGemvMaxM ? 4 : 8;
  __shared__ float partial[kMaxWarpsOf<XROWS>][kPartials][32];
  if constexpr (XROWS == kGemvMaxM) {
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[0][i] + acc[1][i];
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) partial[warp][i][lane] = acc[i / 4][i % 4];
  }
  // A pending norm: r_m from the producer's parts, one warp per activation row (a butterfly
  // sum, the same order in every block), where the prologue did not (norm_early: m = 0).
  if (p.norm.sum_squares && !norm_early) {
    for (int m = warp; m < p.M; m += warps) {
      const float r = inv_rms_of_lane_sums(
          pending_norm_lane_sum(p.norm.sum_squares + int64_t(m) * p.norm.parts, p.norm.parts), p.K, p.norm.eps);
      if (lane == 0) inv_rms[m] = r;
    }
  }
  __syncthreads();
  // x · Wᵀ (+ bias) of block row r (stored row n) and activation row m.
  const auto output = [&](int r, int m, int64_t n) {
    const int i = XROWS == kGemvMaxM ? (r >= 8 ? 2 : 0) + (m & 1) : 4 * (r / 8) + (m >= 8 ? 2 : 0) + (r & 1);
    const int src = XROWS == kGemvMaxM ? (r % 8) * 4 + m / 2 : (m % 8) * 4 + (r % 8) / 2;
    float sum = 0;
    for (int w = 0; w < warps; ++w) sum += partial[w][i][src];
    if (p.norm.sum_squares) sum *= inv_rms[m];
    if (p.bias) sum += p.bias[n];
    return sum;
  };
  if (p.residual) {
    __shared__ float squares[XROWS][kRowsPerBlock];
    for (int o = threadIdx.x; o < kRowsPerBlock * p.M; o += blockDim.x) {
      const int m = o / kRowsPerBlock, r = o % kRowsPerBlock;
      const int64_t n = row_base + r, i = int64_t(m) * p.N + n;
      float square = 0;
      if (n < p.N) {
        const uint16_t before = residual_early && o == int(threadIdx.x) ? early_residual : p.residual[i];
        const uint16_t sum = to_activation<BF16>(from_activation<BF16>(before) + output(r, m, n));
        p.residual[i] = sum;
        const float v = from_activation<BF16>(sum);
        p.y[i] = to_activation<BF16>(v * norm_weight);
        square = v * v;
      }
      squares[m][r] = square;
    }
    __syncthreads();
    if (threadIdx.x < p.M) {
      float sum = 0;
      for (int r = 0; r < kRowsPerBlock; ++r) sum += squares[threadIdx.x][r];
      p.sum_squares[int64_t(threadIdx.x) * gridDim.x + blockIdx.x] = sum;
    }
    return;
  }
  if (p.swiglu) {  // block rows r and r + 8: gate and up of output column 8 b + r
    for (int o = threadIdx.x; o < 8 * p.M; o += blockDim.x) {
      const int m = o / 8, r = o % 8;
      const int64_t n = int64_t(blockIdx.x) * 8 + r;
      // Rounded to the activation type first, as gemv_qn's output is before silu_mul.
      const float gate = from_activation<BF16>(to_activation<BF16>(output(r, m, n)));
      const float up = from_activation<BF16>(to_activation<BF16>(output(r + 8, m, p.paired_half + n)));
      p.y[int64_t(m) * p.paired_half + n] = to_activation<BF16>(gate / (1.0f + expf(-gate)) * up);
    }
    return;
  }
  for (int o = threadIdx.x; o < kRowsPerBlock * p.M; o += blockDim.x) {
    const int m = o / kRowsPerBlock, r = o % kRowsPerBlock;
    const int64_t n = p.paired_half > 0 ? (r < 8 ? 0 : p.paired_half) + int64_t(blockIdx.x) * 8 + r % 8 : row_base + r;
    if (n >= p.N) continue;
    p.y[int64_t(m) * p.N + n] = to_activation<BF16>(output(r, m, n));
  }
}

}  // namespace
}  // namespace gemlite
