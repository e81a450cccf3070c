// Fused qN dequantize + GEMV on tensor cores. See gemv_qn.h for the contract.
//
// Work split. A block owns 16 rows of W (one m16n8k16 A tile); its warps split K by
// tiles (tile t = the 32 words of a row covering 32*E codes, E = 32 / bits), warp w taking
// t = w, w + warps, ... so the block sweeps each row front to back; the warps' fp32
// partial sums meet in shared memory at the end.
//
// Inside a warp, lane = 4 * gid + tig. For rows gid and gid + 8 of the block, lane loads
// the words 16c + 4tig + u (u = 0..3) of tile t for both chunks c = 0, 1: two 16-byte
// loads per row and tile, a warp-wide load covering 8 rows x 64 contiguous bytes.
// Word u holds, at code j, the weight of k = 32 (t E + j) + 16c + 4tig + u. So for
// one (c, j) the thread's four weights of a row sit at four consecutive k, and the
// 16 k of all four tig are consecutive: one mma per (c, j), with
//   A (16 x 16)  a0 = row gid    {u0, u1}   a2 = row gid    {u2, u3}
//                a1 = row gid+8  {u0, u1}   a3 = row gid+8  {u2, u3}
//   B (16 x 8)   b0 = x[gid][k+0, k+1],     b1 = x[gid][k+2, k+3]   (one 8-byte load;
//                lanes gid >= M load row 0: their columns are never stored),
//   C = y for the 16 rows x 8 activation rows, fp32.
// Pairing the same code j of two neighbouring words keeps both halves of an A register
// in one group (one broadcast scale) and makes x a plain 8-byte load: no shared-memory
// staging or permutation of x is needed.
//
// Dequantization of a pair, for fp16 (bf16 in brackets): a byte permute puts the same
// byte window of the two words into the two 16-bit halves, one lop3 masks the code and
// ORs the exponent of 1024 [128], giving 1024 + 2^d q exactly; one fma2 with constants
// removes the offset and the 2^d exactly, one fma2 applies scale and -zero*scale:
// w = q * s + (-z s). 3.5 instructions per 2 weights at 4 bits (PERF.md budgets ~6 per
// weight at 4 bits for everything). bf16 8-bit codes do not fit the 7-bit bf16 mantissa,
// so they go through fp32 (0x4B000000 | q) - 2^23 instead.
//
// Where it stands on the H100 (gpu-check, fp16, M = 1, cold L2, % of a 2.99 TB/s copy):
// q8 95 % at 8192 x 57344 and 89 % at 28672 x 8192; q4g64 73 / 69 %; q3g64 61 / 59 %;
// q2g64 45 / 42 %; 4096 x 4096 shapes 24-60 %. The loop is bound by instructions and
// their latencies (deeper memory pipelines did not help, see the main loop), so the gap
// grows as bits shrink and dequantization work per byte grows.
#include "kernels/qn/gemv_qn.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/group_quant.h"
#include "kernels/qn/qn_format.h"
#include "runtime/error.h"

namespace gemlite {

namespace {

constexpr int kRowsPerBlock = 16;  // the m of the mma
constexpr int kMaxWarps = 16;

struct GemvQnParams {
  const uint32_t* qweight;     // [N, Kw]
  const uint32_t* scale_bias;  // [N, n_groups] {scale, -zero*scale} in the activation type
  const float* bias;           // [N] or null
  const uint16_t* x;           // [M, K] fp16/bf16 bits
  uint16_t* y;                 // [M, N]
  int64_t N, Kw;
  int K, n_groups;  // K < 2^31 - 64 (checked at upload)
  int group_shift;
  int M;
  bool x_vectorized;  // K % 4 == 0 and x 8-byte aligned: B fragments are 8-byte loads
};

// ---- bit-level helpers --------------------------------------------------------------

template <bool BF16>
using Pair = std::conditional_t<BF16, __nv_bfloat162, __half2>;

template <bool BF16>
__device__ __forceinline__ Pair<BF16> as_pair(uint32_t bits) {
  Pair<BF16> v;
  memcpy(&v, &bits, 4);
  return v;
}
template <bool BF16>
__device__ __forceinline__ uint32_t as_bits(Pair<BF16> v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  return bits;
}

__device__ __forceinline__ uint4 load_streaming(const uint32_t* p) {  // 16 bytes, read once
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <bool BF16>
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// ---- where code j of a word sits, and how it becomes a 16-bit float -----------------

// Code j of a word occupies bits [position, position + BITS). The permute takes the
// 16-bit window starting at byte position / 8 of each word; inside it the code starts at
// position % 8. With the magic exponent of 1024 (fp16) or 128 (bf16) a half holds
// integers exactly in its low 10 (7) bits, so a code that would end above them is first
// shifted right by `shift`, leaving it at `offset`: the half reads magic + 2^offset q.
template <int BITS, bool BF16>
struct CodeLayout {
  __host__ __device__ static constexpr int integer_bits() { return BF16 ? 7 : 10; }
  __host__ __device__ static constexpr uint32_t magic() { return BF16 ? 0x43004300u : 0x64006400u; }  // 128, 1024

  __host__ __device__ static constexpr int position(int j) { return 32 - BITS * (j + 1); }
  __host__ __device__ static constexpr int byte(int j) { return position(j) / 8; }
  __host__ __device__ static constexpr int shift(int j) {
    const int end = position(j) % 8 + BITS;
    return end > integer_bits() ? end - integer_bits() : 0;
  }
  __host__ __device__ static constexpr int offset(int j) { return position(j) % 8 - shift(j); }
  // Result bytes: {lo.byte(j), lo.byte(j)+1, hi.byte(j), hi.byte(j)+1} (capped at byte 3;
  // a code never needs a fifth byte since position + BITS <= 32).
  __host__ __device__ static constexpr uint32_t selector(int j) {
    const uint32_t b = uint32_t(byte(j)), next = b + 1 < 4 ? b + 1 : 3;
    return b | next << 4 | (4 + b) << 8 | (4 + next) << 12;
  }
  __host__ __device__ static constexpr uint32_t mask(int j) {
    const uint32_t m = ((1u << BITS) - 1) << offset(j);
    return m | m << 16;
  }
  // 16-bit patterns of 2^-offset and -(magic value) * 2^-offset.
  __host__ __device__ static constexpr uint32_t unscale(int j) {
    const uint32_t v = BF16 ? uint32_t(127 - offset(j)) << 7 : uint32_t(15 - offset(j)) << 10;
    return v | v << 16;
  }
  __host__ __device__ static constexpr uint32_t unoffset(int j) {
    const uint32_t v = BF16 ? 0x8000u | uint32_t(134 - offset(j)) << 7
                            : 0x8000u | uint32_t(25 - offset(j)) << 10;
    return v | v << 16;
  }
};

// The codes j of words lo and hi as the exact integers {q_lo, q_hi} in the pair type.
template <int BITS, bool BF16, int J>
__device__ __forceinline__ Pair<BF16> code_pair(uint32_t lo, uint32_t hi, uint32_t magic) {
  using L = CodeLayout<BITS, BF16>;
  if constexpr (BF16 && BITS == 8) {
    // 0x4B0000qq is the float 2^23 + q; minus 2^23 it is q, whose low 16 bits are zero,
    // so its high half is the exact bf16.
    constexpr uint32_t sel = uint32_t(L::byte(J)) | 5u << 4 | 6u << 8 | 7u << 12;
    const float f_lo = __uint_as_float(__byte_perm(lo, 0x4B000000u, sel)) - 8388608.0f;
    const float f_hi = __uint_as_float(__byte_perm(hi, 0x4B000000u, sel)) - 8388608.0f;
    return as_pair<BF16>(__byte_perm(__float_as_uint(f_lo), __float_as_uint(f_hi), 0x7632));
  } else {
    uint32_t window = __byte_perm(lo, hi, L::selector(J));
    if constexpr (L::shift(J) > 0) window >>= L::shift(J);
    // (window & mask) | magic in one lop3 with `magic` (== L::magic()) in a register:
    // written as and + or, the compiler emitted two LOP3s (a LOP3 takes one immediate),
    // a third of the dequantization's instructions.
    uint32_t bits;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(bits) : "r"(window), "n"(L::mask(J)), "r"(magic));
    const Pair<BF16> h = as_pair<BF16>(bits);
    return __hfma2(h, as_pair<BF16>(L::unscale(J)), as_pair<BF16>(L::unoffset(J)));
  }
}

// Weights {w_lo, w_hi} = q * scale + (-zero * scale), the pair of `scale_bias` broadcast.
template <int BITS, bool BF16, int J>
__device__ __forceinline__ uint32_t weight_pair(uint32_t lo, uint32_t hi, uint32_t scale_bias,
                                                uint32_t magic) {
  const Pair<BF16> sb = as_pair<BF16>(scale_bias);
  Pair<BF16> scale, bias;
  if constexpr (BF16) {
    scale = __low2bfloat162(sb);
    bias = __high2bfloat162(sb);
  } else {
    scale = __low2half2(sb);
    bias = __high2half2(sb);
  }
  return as_bits<BF16>(__hfma2(code_pair<BITS, BF16, J>(lo, hi, magic), scale, bias));
}

// Calls f(std::integral_constant<int, J>) for J = BEGIN..END-1: an unrolled loop whose
// index is a compile-time constant (code_pair needs one).
template <int BEGIN, int END, class F>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (BEGIN < END) {
    f(std::integral_constant<int, BEGIN>{});
    static_for<BEGIN + 1, END>(f);
  }
}

// What a lane needs besides its words: its activation row and its two rows' scale/bias
// pairs. Lanes whose m >= M read row 0 and rows past N read row N - 1: an mma output
// element depends only on its own row of A and column of B, so those lanes produce
// garbage only in outputs that are never stored, and need no masking.
struct LaneInputs {
  const uint16_t* x_row;  // [K]
  const uint32_t* sb_row[2];
  uint32_t magic;  // CodeLayout::magic(), opaque to the compiler so that it stays in one register
};

// Codes J0 .. J0 + JC - 1 of every word of a tile (k blocks b0 = block32 + J0 ..): first
// all loads (scale/bias per row and block, 8-byte x fragments per block and chunk c), then
// the 2 JC mmas. Loads carry no branches, so all of them are in flight together (the
// first version loaded next to each use, behind branches, and ran at ~40 % of copy).
// Only a chunk reaching past K needs clamped addresses and zeroed x.
template <int BITS, bool BF16, int J0, int JC>
__device__ __forceinline__ void tile_chunk(const GemvQnParams& p, const LaneInputs& in,
                                           const uint4 (&words)[2][2], int block32, int tig,
                                           float (&acc)[2][4]) {
  uint32_t sb[JC][2];
  uint2 xb[JC][2];
  const int b0 = block32 + J0;
  const uint16_t* x = in.x_row + b0 * 32 + 4 * tig;  // + 32 j + 16 c + i: k
  if ((b0 + JC) * 32 <= p.K) {
#pragma unroll
    for (int j = 0; j < JC; ++j) {
      const int g = (b0 + j) >> p.group_shift;
#pragma unroll
      for (int r = 0; r < 2; ++r) sb[j][r] = __ldg(in.sb_row[r] + g);
    }
    if (p.x_vectorized) {
#pragma unroll
      for (int j = 0; j < JC; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) xb[j][c] = __ldg(reinterpret_cast<const uint2*>(x + 32 * j + 16 * c));
    } else {
#pragma unroll
      for (int j = 0; j < JC; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const uint16_t* e = x + 32 * j + 16 * c;
          xb[j][c] = make_uint2(__ldg(e) | uint32_t(__ldg(e + 1)) << 16, __ldg(e + 2) | uint32_t(__ldg(e + 3)) << 16);
        }
    }
  } else {  // the chunk reaching past K: groups clamped, x zero for k >= K
#pragma unroll
    for (int j = 0; j < JC; ++j) {
      const int g = min((b0 + j) >> p.group_shift, p.n_groups - 1);
#pragma unroll
      for (int r = 0; r < 2; ++r) sb[j][r] = __ldg(in.sb_row[r] + g);
    }
    const int k0 = b0 * 32 + 4 * tig;
#pragma unroll
    for (int j = 0; j < JC; ++j) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int k = k0 + 32 * j + 16 * c;
        uint32_t e[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t v = __ldg(in.x_row + min(k + i, p.K - 1));
          e[i] = k + i < p.K ? v : 0u;
        }
        xb[j][c] = make_uint2(e[0] | e[1] << 16, e[2] | e[3] << 16);
      }
    }
  }
  static_for<0, JC>([&](auto jj) {
    constexpr int J = J0 + decltype(jj)::value, j = decltype(jj)::value;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const uint4& w0 = words[0][c];
      const uint4& w1 = words[1][c];
      mma_16816<BF16>(acc[c], weight_pair<BITS, BF16, J>(w0.x, w0.y, sb[j][0], in.magic),
                      weight_pair<BITS, BF16, J>(w1.x, w1.y, sb[j][1], in.magic),
                      weight_pair<BITS, BF16, J>(w0.z, w0.w, sb[j][0], in.magic),
                      weight_pair<BITS, BF16, J>(w1.z, w1.w, sb[j][1], in.magic), xb[j][c].x, xb[j][c].y);
    }
  });
}

__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}


// Pulls tile t's scale/bias and x lines into L1 a tile ahead, so tile_chunk's loads hit
// (without it they waited on DRAM every few tiles: the scale/bias pairs are weight bytes
// too, streamed once).
template <int BITS>
__device__ __forceinline__ void prefetch_tile_inputs(const GemvQnParams& p, const LaneInputs& in, int t,
                                                     int lane) {
  constexpr int E = 32 / BITS;
  const int first = t * E, last = first + E - 1;  // k blocks
  if (lane < 4) {  // both rows, first and last group of the tile (a tile spans <= 32 groups)
    const int g = min((lane & 1 ? last : first) >> p.group_shift, p.n_groups - 1);
    prefetch_l1((lane & 2 ? in.sb_row[1] : in.sb_row[0]) + g);
  }
  // The lanes of activation row gid (all of them read row 0 where gid >= M) share the
  // 128-byte lines covering its 32 E halves at any alignment.
  constexpr int kLines = E / 2 + 1;
#pragma unroll
  for (int line = lane % 4; line < kLines; line += 4)
    prefetch_l1(in.x_row + min(first * 32 + line * 64, p.K - 1));
}

// Blocks per chunk: 4 (the last chunk of a word takes what is left). Eight (16 x
// fragments + 16 scale pairs live at once) spilled at the 128 registers that 16-warp
// blocks allow; 1-3 bits still spill 28-80 bytes, 4-8 bits none.
constexpr int kChunkBlocks = 4;

// The 16-row x 32E-column tile starting at 32-column block `block32`: 2E mmas into acc[c].
template <int BITS, bool BF16>
__device__ __forceinline__ void tile_step(const GemvQnParams& p, const LaneInputs& in,
                                          const uint4 (&words)[2][2], int block32, int tig,
                                          float (&acc)[2][4]) {
  constexpr int E = 32 / BITS;
  static_for<0, (E + kChunkBlocks - 1) / kChunkBlocks>([&](auto h) {
    constexpr int J0 = decltype(h)::value * kChunkBlocks;
    tile_chunk<BITS, BF16, J0, (E - J0 < kChunkBlocks ? E - J0 : kChunkBlocks)>(p, in, words, block32, tig, acc);
  });
}

__device__ __forceinline__ void load_tile(const uint32_t* row0, const uint32_t* row1, int t, int tig,
                                          uint4 (&words)[2][2]) {
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    words[0][c] = load_streaming(row0 + t * 32 + 16 * c + 4 * tig);
    words[1][c] = load_streaming(row1 + t * 32 + 16 * c + 4 * tig);
  }
}

template <bool BF16>
__device__ __forceinline__ uint16_t to_activation(float v) {
  if constexpr (BF16) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    return *reinterpret_cast<const uint16_t*>(&h);
  } else {
    const __half h = __float2half_rn(v);
    return *reinterpret_cast<const uint16_t*>(&h);
  }
}

// W [N, Kw] qN codes, x [M, K] -> y [M, N]. PRECOND: blockDim.x = 32 * warps with
// warps <= kMaxWarps, grid.x = ceil(N / 16), K < 2^31 - 64.
template <int BITS, bool BF16>
__global__ void __launch_bounds__(kMaxWarps * 32) gemv_qn_kernel(const GemvQnParams p) {
  constexpr int E = 32 / BITS;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int gid = lane / 4, tig = lane % 4;
  const int64_t row_base = int64_t(blockIdx.x) * kRowsPerBlock;
  const int64_t r0 = row_base + gid, r1 = r0 + 8;
  const int64_t c0 = min(r0, p.N - 1), c1 = min(r1, p.N - 1);
  const uint32_t* q0 = p.qweight + c0 * p.Kw;
  const uint32_t* q1 = p.qweight + c1 * p.Kw;
  LaneInputs in;
  in.x_row = p.x + (gid < p.M ? int64_t(gid) * p.K : 0);
  in.sb_row[0] = p.scale_bias + c0 * p.n_groups;
  in.sb_row[1] = p.scale_bias + c1 * p.n_groups;
  asm volatile("mov.b32 %0, %1;" : "=r"(in.magic) : "n"(CodeLayout<BITS, BF16>::magic()));
  const int tiles = int(p.Kw / 32);

  // The next tile's four 16-byte loads stay in flight while this one is dequantized.
  // Deeper pipelines did not pay: a cp.async ring per warp of 2..5 tiles in shared memory
  // ran 5-8 % slower at 2 stages and slower still with more (less L1 left for the scale
  // and x lines), and L2 prefetches of later tiles cost 5-15 %: the loop is bound by its
  // instructions and their latencies, not by bytes in flight.
  float acc[2][4] = {};  // two chains (c = 0, 1) halve the mma dependency chain
  uint4 cur[2][2];
  if (warp < tiles) {
    load_tile(q0, q1, warp, tig, cur);
    prefetch_tile_inputs<BITS>(p, in, warp, lane);
  }
  for (int t = warp; t < tiles; t += warps) {
    uint4 next[2][2];
    const bool has_next = t + warps < tiles;
    if (has_next) {
      load_tile(q0, q1, t + warps, tig, next);
      prefetch_tile_inputs<BITS>(p, in, t + warps, lane);
    }
    tile_step<BITS, BF16>(p, in, cur, t * E, tig, acc);
    if (has_next) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        cur[0][c] = next[0][c];
        cur[1][c] = next[1][c];
      }
    }
  }

  // C fragment: acc[.][0..1] = row gid, columns (m) 2tig, 2tig+1; acc[.][2..3] = row gid + 8.
  __shared__ float partial[kMaxWarps][4][32];
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[0][i] + acc[1][i];
  __syncthreads();
  for (int o = threadIdx.x; o < kRowsPerBlock * p.M; o += blockDim.x) {
    const int m = o / kRowsPerBlock, r = o % kRowsPerBlock;
    const int64_t n = row_base + r;
    if (n >= p.N) continue;
    const int i = (r >= 8 ? 2 : 0) + (m & 1), src = (r % 8) * 4 + m / 2;
    float sum = 0;
    for (int w = 0; w < warps; ++w) sum += partial[w][i][src];
    if (p.bias) sum += p.bias[n];
    p.y[int64_t(m) * p.N + n] = to_activation<BF16>(sum);
  }
}

using KernelFn = void (*)(GemvQnParams);

template <bool BF16>
KernelFn pick_kernel(int bits) {
  switch (bits) {
    case 1: return gemv_qn_kernel<1, BF16>;
    case 2: return gemv_qn_kernel<2, BF16>;
    case 3: return gemv_qn_kernel<3, BF16>;
    case 4: return gemv_qn_kernel<4, BF16>;
    case 5: return gemv_qn_kernel<5, BF16>;
    case 6: return gemv_qn_kernel<6, BF16>;
    case 7: return gemv_qn_kernel<7, BF16>;
    case 8: return gemv_qn_kernel<8, BF16>;
  }
  throw Error("gemv_qn: bits " + std::to_string(bits) + " not in 1..8");
}

int log2_exact(int64_t v) {  // -1 when v is not a power of two
  int s = 0;
  while ((int64_t(1) << s) < v) ++s;
  return (int64_t(1) << s) == v ? s : -1;
}

uint16_t to_activation_bits(float v, DType act) {
  return act == DType::BF16 ? float_to_bf16(v) : float_to_half(v);
}

}  // namespace

size_t QnDeviceWeight::weight_bytes() const {
  return size_t(N) * size_t(Kw) * 4 + size_t(N) * size_t(n_groups) * 4 + (bias ? size_t(N) * 4 : 0);
}

QnDeviceWeight upload_qn_weight(const PackedWeight& w, DType act) {
  const std::string where = "upload_qn_weight (" + w.format.name() + ")";
  if (w.format.kind != FormatKind::QN) fail(where, "not a qN weight");
  if (act != DType::F16 && act != DType::BF16)
    fail(where, std::string("activation type ") + dtype_name(act) + " (expected F16 or BF16)");
  QnDeviceWeight d;
  d.act = act;
  d.bits = w.format.bits;
  d.group = w.format.group;
  d.N = w.rows;
  d.K = w.cols;
  if (d.K > (int64_t(1) << 31) - 1024) fail(where, "K = " + std::to_string(d.K) + " too large for the GPU kernel");
  d.Kw = qn_words_per_row(d.K, d.bits);
  d.n_groups = group_count(d.group, d.K);
  if (d.n_groups == 1) {
    d.group_shift = 30;  // every k in group 0 (the index is clamped as well)
  } else {
    d.group_shift = log2_exact(group_size(d.group, d.K) / 32);
    if (d.group % 32 != 0 || d.group_shift < 0)
      fail(where, "group " + std::to_string(d.group) + " not supported on the GPU (expected 32 * 2^i or per-channel)");
  }
  const HostTensor& qweight = w.part("qweight");
  const uint16_t* scales = w.part("scales").as<uint16_t>();  // [N, n_groups]
  const uint16_t* zeros = w.part("zeros").as<uint16_t>();    // [N, n_groups]
  if (qweight.nbytes() != size_t(d.N * d.Kw * 4)) fail(where, "qweight has shape " + qweight.shape_string());
  std::vector<uint32_t> scale_bias(size_t(d.N * d.n_groups));
  for (size_t i = 0; i < scale_bias.size(); ++i) {
    const float s = half_to_float(scales[i]), z = half_to_float(zeros[i]);
    // z * s is exact in fp32 (11-bit significands), so this rounds once.
    scale_bias[i] = uint32_t(to_activation_bits(s, act)) | uint32_t(to_activation_bits(-z * s, act)) << 16;
  }
  try {
    uint32_t* q = nullptr;
    uint32_t* sb = nullptr;
    CUDA_CHECK(cudaMalloc(&q, qweight.nbytes()));
    d.qweight = q;
    CUDA_CHECK(cudaMemcpy(q, qweight.data, qweight.nbytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc(&sb, scale_bias.size() * 4));
    d.scale_bias = sb;
    CUDA_CHECK(cudaMemcpy(sb, scale_bias.data(), scale_bias.size() * 4, cudaMemcpyHostToDevice));
    const auto bias = w.parts.find("bias");
    if (bias != w.parts.end()) {
      float* b = nullptr;
      CUDA_CHECK(cudaMalloc(&b, size_t(d.N) * 4));
      d.bias = b;
      CUDA_CHECK(cudaMemcpy(b, bias->second.data, size_t(d.N) * 4, cudaMemcpyHostToDevice));
    }
  } catch (...) {
    free_qn_weight(&d);
    throw;
  }
  return d;
}

void free_qn_weight(QnDeviceWeight* w) {
  cudaFree(const_cast<uint32_t*>(w->qweight));
  cudaFree(const_cast<uint32_t*>(w->scale_bias));
  cudaFree(const_cast<float*>(w->bias));
  *w = QnDeviceWeight{};
}

void gemv_qn(const QnDeviceWeight& w, const void* x, void* y, int M, DType act,
             cudaStream_t stream, const GemvQnConfig& config) {
  if (M < 1 || M > kGemvMaxM)
    throw Error("gemv_qn: M = " + std::to_string(M) + " (expected 1.." + std::to_string(kGemvMaxM) + ")");
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
  p.group_shift = w.group_shift;
  p.M = M;
  p.x_vectorized = w.K % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0;

  // Warps per block, 4 or 8: the one whose last wave of blocks is fullest, at 16 resident
  // warps per SM (128 registers a thread), 4 on a tie. The sweep on the H100 (q8, q4g64,
  // q2g64): 8 won at N = 4096 and 10240 (0.5 / 1.2 waves with 4), 4 at N = 8192 and 57344.
  const int64_t tiles = w.Kw / 32;
  const int64_t blocks = (w.N + kRowsPerBlock - 1) / kRowsPerBlock;
  int warps = config.warps_per_block;
  if (warps <= 0) {
    int device = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const auto last_wave_fill = [&](int per_block) {
      const double waves = double(blocks) / double(int64_t(sms) * (16 / per_block));
      return waves / std::ceil(waves);
    };
    warps = last_wave_fill(8) > last_wave_fill(4) + 0.02 ? 8 : 4;
  }
  warps = int(std::clamp<int64_t>(std::min<int64_t>(warps, tiles), 1, kMaxWarps));
  const KernelFn kernel = act == DType::BF16 ? pick_kernel<true>(w.bits) : pick_kernel<false>(w.bits);
  kernel<<<dim3(unsigned(blocks)), dim3(unsigned(warps * 32)), 0, stream>>>(p);
  CHECK_LAST_LAUNCH("gemv_qn_kernel");
}

}  // namespace gemlite
