#pragma once
// How a qN word pair becomes mma A-fragment registers: where code j of a word sits, the
// lop3 with a magic exponent that makes it a 16-bit float, and the fma2 with the group's
// {scale, -zero * scale} pair. Shared by the decode GEMV (gemv_qn_kernel.cuh) and the
// large-M tiled matmul (gemm_qn_tiled.cuh), so both read the format one way.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace gemlite {
namespace {

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

// ---- where code j of a word sits, and how it becomes a 16-bit float -----------------

// Code j of a word occupies bits [position, position + BITS). The pair {word lo, word hi}
// becomes one 32-bit register whose two halves hold the code of lo and of hi in the same
// place; with the magic exponent of 1024 (fp16) or 128 (bf16) a half holds integers
// exactly in its low 10 (7) bits, so a code that would end above them is first shifted
// right, leaving it at `offset`: the half reads magic + 2^offset q.
//
// Codes that lie inside one 16-bit half of their words come from two shared permutes per
// word pair, X = the low halves {lo, hi} and Y = the high halves, and one shift per run of
// codes that fits the integer bits (greedy, below): at 2 bits X, X >> 10, Y, Y >> 10 feed
// all 16 codes, 2 + 2 instructions per 16 pairs where a permute per pair took 16. Codes
// that straddle bit 16 (3, 5, 6, 7 bits) take their own permute of the 16-bit window
// starting at byte position / 8.
//
// BITS is the stride of codes in a word, WIDTH the bits of a code's value (s7: 8 and 7).
template <int BITS, bool BF16, int WIDTH = BITS>
struct CodeLayout {
  __host__ __device__ static constexpr int integer_bits() { return BF16 ? 7 : 10; }
  __host__ __device__ static constexpr uint32_t magic() { return BF16 ? 0x43004300u : 0x64006400u; }  // 128, 1024
  __host__ __device__ static constexpr int codes() { return 32 / BITS; }

  __host__ __device__ static constexpr int position(int j) { return 32 - BITS * (j + 1); }
  // 0: bits [0, 16); 1: bits [16, 32); -1: straddles bit 16.
  __host__ __device__ static constexpr int half(int j) {
    return position(j) + BITS <= 16 ? 0 : position(j) >= 16 ? 1 : -1;
  }
  // Right shift of X or Y for code j: codes of one half are visited from the lowest
  // position up, and a new shift starts where the current one would leave a code above
  // the integer bits (so codes share shifts and the compiler emits each shift once).
  __host__ __device__ static constexpr int half_shift(int j) {
    int s = 0;
    for (int i = codes() - 1; i >= 0; --i) {  // ascending position
      if (half(i) != half(j)) continue;
      const int rel = position(i) - 16 * half(i);
      if (rel - s + WIDTH > integer_bits()) s = rel;
      if (i == j) return s;
    }
    return 0;
  }
  // Straddling codes: the window of bytes byte(j), byte(j) + 1 of each word.
  __host__ __device__ static constexpr int byte(int j) { return position(j) / 8; }
  __host__ __device__ static constexpr int window_shift(int j) {
    const int end = position(j) % 8 + WIDTH;
    return end > integer_bits() ? end - integer_bits() : 0;
  }
  __host__ __device__ static constexpr int offset(int j) {
    return half(j) >= 0 ? position(j) - 16 * half(j) - half_shift(j) : position(j) % 8 - window_shift(j);
  }
  // Result bytes: {lo.byte(j), lo.byte(j)+1, hi.byte(j), hi.byte(j)+1} (capped at byte 3;
  // a code never needs a fifth byte since position + BITS <= 32).
  __host__ __device__ static constexpr uint32_t selector(int j) {
    const uint32_t b = uint32_t(byte(j)), next = b + 1 < 4 ? b + 1 : 3;
    return b | next << 4 | (4 + b) << 8 | (4 + next) << 12;
  }
  __host__ __device__ static constexpr uint32_t mask(int j) {
    const uint32_t m = ((1u << WIDTH) - 1) << offset(j);
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

// The two halves' registers of a word pair (see CodeLayout): X = {lo[0:16), hi[0:16)},
// Y = {lo[16:32), hi[16:32)}.
struct WordPair {
  uint32_t lo, hi, x, y;
};
__device__ __forceinline__ WordPair word_pair(uint32_t lo, uint32_t hi) {
  return {lo, hi, __byte_perm(lo, hi, 0x5410), __byte_perm(lo, hi, 0x7632)};
}

// Codes j of words lo and hi in the two halves' low bits at L::offset(J), ORed with
// `magic`: with L::magic() each half reads magic + 2^offset q; with 0 (fp16) it is the
// subnormal 2^(offset - 24) q, exact, which the raw-code GEMV multiplies on tensor cores
// as it is (gemv_qn_kernel.cuh). Not for bf16 8-bit codes (code_pair's float path).
template <int BITS, bool BF16, int J, int WIDTH>
__device__ __forceinline__ uint32_t code_bits(const WordPair& w, uint32_t magic) {
  using L = CodeLayout<BITS, BF16, WIDTH>;
  static_assert(!(BF16 && WIDTH == 8), "bf16 8-bit codes do not fit the integer bits");
  uint32_t window;
  if constexpr (L::half(J) == 0) {
    window = w.x >> L::half_shift(J);
  } else if constexpr (L::half(J) == 1) {
    window = w.y >> L::half_shift(J);
  } else {
    window = __byte_perm(w.lo, w.hi, L::selector(J));
    if constexpr (L::window_shift(J) > 0) window >>= L::window_shift(J);
  }
  // (window & mask) | magic in one lop3 with `magic` in a register: written as and + or,
  // the compiler emitted two LOP3s (a LOP3 takes one immediate), a third of the
  // dequantization's instructions.
  uint32_t bits;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(bits) : "r"(window), "n"(L::mask(J)), "r"(magic));
  return bits;
}

// The codes j of words lo and hi as the exact integers {q_lo, q_hi} in the pair type.
template <int BITS, bool BF16, int J, int WIDTH>
__device__ __forceinline__ Pair<BF16> code_pair(const WordPair& w, uint32_t magic) {
  using L = CodeLayout<BITS, BF16, WIDTH>;
  if constexpr (BF16 && WIDTH == 8) {
    // 0x4B0000qq is the float 2^23 + q; minus 2^23 it is q, whose low 16 bits are zero,
    // so its high half is the exact bf16.
    constexpr uint32_t sel = uint32_t(L::byte(J)) | 5u << 4 | 6u << 8 | 7u << 12;
    const float f_lo = __uint_as_float(__byte_perm(w.lo, 0x4B000000u, sel)) - 8388608.0f;
    const float f_hi = __uint_as_float(__byte_perm(w.hi, 0x4B000000u, sel)) - 8388608.0f;
    return as_pair<BF16>(__byte_perm(__float_as_uint(f_lo), __float_as_uint(f_hi), 0x7632));
  } else {
    const Pair<BF16> h = as_pair<BF16>(code_bits<BITS, BF16, J, WIDTH>(w, magic));  // magic == L::magic()
    return __hfma2(h, as_pair<BF16>(L::unscale(J)), as_pair<BF16>(L::unoffset(J)));
  }
}

// Weights {w_lo, w_hi} = q * scale + (-zero * scale), the pair of `scale_bias` broadcast.
// SPARSE (s7): code J is a pair byte, value7 | first_kept << 7; the weights of its first
// element (HALF 0, k0) keep the value where first_kept is set and are +0 elsewhere, those of
// its second (HALF 1, k1 = k0 + 32) the other way round. A sign-replicating permute turns
// bit 7 of each word's byte J into a 16-bit mask, one lop3 applies it.
template <int BITS, bool BF16, int J, bool SPARSE = false, int HALF = 0>
__device__ __forceinline__ uint32_t weight_pair(const WordPair& w, uint32_t scale_bias, uint32_t magic) {
  const Pair<BF16> sb = as_pair<BF16>(scale_bias);
  Pair<BF16> scale, bias;
  if constexpr (BF16) {
    scale = __low2bfloat162(sb);
    bias = __high2bfloat162(sb);
  } else {
    scale = __low2half2(sb);
    bias = __high2half2(sb);
  }
  const uint32_t value = as_bits<BF16>(__hfma2(code_pair<BITS, BF16, J, SPARSE ? 7 : BITS>(w, magic), scale, bias));
  if constexpr (SPARSE) {
    static_assert(BITS == 8, "s7 pair bytes are packed as 8-bit codes");
    constexpr uint32_t b = uint32_t(3 - J);  // byte of code J (position 24 - 8 J)
    constexpr uint32_t sel = (8u | b) | (8u | b) << 4 | (8u | (4 + b)) << 8 | (8u | (4 + b)) << 12;
    // prmt's sign-replicate bit (bit 3 of a selector nibble); __byte_perm ignores it.
    uint32_t first_kept;  // 0xFFFF per half where bit 7 of the word's byte J is set
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(first_kept) : "r"(w.lo), "r"(w.hi), "n"(sel));
    return HALF == 0 ? (value & first_kept) : (value & ~first_kept);
  } else {
    return value;
  }
}

}  // namespace
}  // namespace gemlite
