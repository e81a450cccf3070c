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
//                columns gid >= M are zero), C = y for the 16 rows x 8 activation rows.
// Pairing the same code j of two neighbouring words keeps both halves of an A register
// in one group (one broadcast scale) and makes x a plain 8-byte load: no shared-memory
// staging or permutation of x is needed.
//
// Dequantization of a pair, for fp16 (bf16 in brackets): a byte permute puts the same
// byte window of the two words into the two 16-bit halves, one lop3 masks the code and
// ORs the exponent of 1024 [128], giving 1024 + 2^d q exactly; one fma2 with constants
// removes the offset and the 2^d exactly, one fma2 applies scale and -zero*scale:
// w = q * s + (-z s). About 3.5 instructions per 2 weights at 4 bits (PERF.md budgets ~6
// per weight at 4 bits for everything). bf16 8-bit codes do not fit the 7-bit bf16
// mantissa, so they go through fp32 (0x4B000000 | q) - 2^23 instead.
#include "kernels/qn/gemv_qn.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <string>
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
  int64_t N, K, Kw, n_groups;
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
  static constexpr int kCodesPerWord = 32 / BITS;
  static constexpr int kIntegerBits = BF16 ? 7 : 10;
  static constexpr uint32_t kMagic = BF16 ? 0x43004300u : 0x64006400u;  // 128 / 1024 twice

  static constexpr int position(int j) { return 32 - BITS * (j + 1); }
  static constexpr int byte(int j) { return position(j) / 8; }
  static constexpr int shift(int j) {
    const int end = position(j) % 8 + BITS;
    return end > kIntegerBits ? end - kIntegerBits : 0;
  }
  static constexpr int offset(int j) { return position(j) % 8 - shift(j); }
  // Result bytes: {lo.byte(j), lo.byte(j)+1, hi.byte(j), hi.byte(j)+1} (capped at byte 3;
  // a code never needs a fifth byte since position + BITS <= 32).
  static constexpr uint32_t selector(int j) {
    const uint32_t b = uint32_t(byte(j)), next = b + 1 < 4 ? b + 1 : 3;
    return b | next << 4 | (4 + b) << 8 | (4 + next) << 12;
  }
  static constexpr uint32_t mask(int j) {
    const uint32_t m = ((1u << BITS) - 1) << offset(j);
    return m | m << 16;
  }
  // 16-bit patterns of 2^-offset and -(magic value) * 2^-offset.
  static constexpr uint32_t unscale(int j) {
    const uint32_t v = BF16 ? uint32_t(127 - offset(j)) << 7 : uint32_t(15 - offset(j)) << 10;
    return v | v << 16;
  }
  static constexpr uint32_t unoffset(int j) {
    const uint32_t v = BF16 ? 0x8000u | uint32_t(134 - offset(j)) << 7
                            : 0x8000u | uint32_t(25 - offset(j)) << 10;
    return v | v << 16;
  }
};

// The codes j of words lo and hi as the exact integers {q_lo, q_hi} in the pair type.
template <int BITS, bool BF16, int J>
__device__ __forceinline__ Pair<BF16> code_pair(uint32_t lo, uint32_t hi) {
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
    const Pair<BF16> h = as_pair<BF16>((window & L::mask(J)) | L::kMagic);
    return __hfma2(h, as_pair<BF16>(L::unscale(J)), as_pair<BF16>(L::unoffset(J)));
  }
}

// Weights {w_lo, w_hi} = q * scale + (-zero * scale), the pair of `scale_bias` broadcast.
template <int BITS, bool BF16, int J>
__device__ __forceinline__ uint32_t weight_pair(uint32_t lo, uint32_t hi, uint32_t scale_bias) {
  const Pair<BF16> sb = as_pair<BF16>(scale_bias);
  Pair<BF16> scale, bias;
  if constexpr (BF16) {
    scale = __low2bfloat162(sb);
    bias = __high2bfloat162(sb);
  } else {
    scale = __low2half2(sb);
    bias = __high2half2(sb);
  }
  return as_bits<BF16>(__hfma2(code_pair<BITS, BF16, J>(lo, hi), scale, bias));
}

// B fragment: x[m][k .. k+3] as two 32-bit pairs, zero where m >= M or k >= K.
__device__ __forceinline__ uint2 load_x(const GemvQnParams& p, int m, int64_t k) {
  uint2 v = make_uint2(0, 0);
  if (m >= p.M) return v;
  const uint16_t* row = p.x + int64_t(m) * p.K;
  if (p.x_vectorized) {
    if (k < p.K) v = __ldg(reinterpret_cast<const uint2*>(row + k));  // K % 4 == 0: all 4 in
  } else {
    uint16_t e[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) e[i] = k + i < p.K ? __ldg(row + k + i) : uint16_t(0);
    v.x = uint32_t(e[0]) | uint32_t(e[1]) << 16;
    v.y = uint32_t(e[2]) | uint32_t(e[3]) << 16;
  }
  return v;
}

// One tile of the warp's two rows: 2E mmas into acc[c].
template <int BITS, bool BF16, int J>
__device__ __forceinline__ void tile_step(const GemvQnParams& p, const uint4 (&words)[2][2],
                                          const uint32_t* sb_row0, const uint32_t* sb_row1,
                                          int64_t block32, int gid, int tig, float (&acc)[2][4]) {
  if constexpr (J < 32 / BITS) {
    const int64_t b = block32 + J;  // k / 32 of this code
    const int64_t g = min(b >> p.group_shift, p.n_groups - 1);
    const uint32_t sb0 = __ldg(sb_row0 + g), sb1 = __ldg(sb_row1 + g);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const uint2 xb = load_x(p, gid, b * 32 + 16 * c + 4 * tig);
      const uint4& w0 = words[0][c];
      const uint4& w1 = words[1][c];
      mma_16816<BF16>(acc[c], weight_pair<BITS, BF16, J>(w0.x, w0.y, sb0),
                      weight_pair<BITS, BF16, J>(w1.x, w1.y, sb1),
                      weight_pair<BITS, BF16, J>(w0.z, w0.w, sb0),
                      weight_pair<BITS, BF16, J>(w1.z, w1.w, sb1), xb.x, xb.y);
    }
    tile_step<BITS, BF16, J + 1>(p, words, sb_row0, sb_row1, block32, gid, tig, acc);
  }
}

__device__ __forceinline__ void load_tile(const uint32_t* row0, const uint32_t* row1, int64_t t,
                                          int tig, uint4 (&words)[2][2]) {
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

// W [N, Kw] qN codes, x [M, K] -> y [M, N]. Block = 16 rows, blockDim.x = 32 * warps
// (warps <= kMaxWarps); grid.x = ceil(N / 16).
template <int BITS, bool BF16>
__global__ void __launch_bounds__(kMaxWarps * 32) gemv_qn_kernel(const GemvQnParams p) {
  constexpr int E = 32 / BITS;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int gid = lane / 4, tig = lane % 4;
  const int64_t row_base = int64_t(blockIdx.x) * kRowsPerBlock;
  // Rows past N read row N - 1 with a zero scale and bias: their weights are 0.
  const int64_t r0 = row_base + gid, r1 = r0 + 8;
  const int64_t c0 = min(r0, p.N - 1), c1 = min(r1, p.N - 1);
  const uint32_t* q0 = p.qweight + c0 * p.Kw;
  const uint32_t* q1 = p.qweight + c1 * p.Kw;
  const uint32_t* sb0 = p.scale_bias + c0 * p.n_groups;
  const uint32_t* sb1 = p.scale_bias + c1 * p.n_groups;
  const int64_t tiles = p.Kw / 32;

  float acc[2][4] = {};  // two chains (c = 0, 1) halve the mma dependency chain
  if (r0 < p.N) {        // a warp's rows are either all past N or start inside
    uint4 cur[2][2], next[2][2];
    int64_t t = warp;
    if (t < tiles) load_tile(q0, q1, t, tig, cur);
    for (; t < tiles; t += warps) {
      // Keep the next tile's 4 loads in flight while this one is dequantized.
      if (t + warps < tiles) load_tile(q0, q1, t + warps, tig, next);
      if (r1 >= p.N) {
#pragma unroll
        for (int c = 0; c < 2; ++c) cur[1][c] = make_uint4(0, 0, 0, 0);
      }
      tile_step<BITS, BF16, 0>(p, cur, sb0, r1 < p.N ? sb1 : sb0, t * E, gid, tig, acc);
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        cur[0][c] = next[0][c];
        cur[1][c] = next[1][c];
      }
    }
  }

  // C fragment: acc[.][0..1] = row gid, columns 2tig, 2tig+1; acc[.][2..3] = row gid + 8.
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

// Zeroes the rows-past-N fragment: done by the caller via a zero scale_bias instead.

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
  p.K = w.K;
  p.Kw = w.Kw;
  p.n_groups = w.n_groups;
  p.group_shift = w.group_shift;
  p.M = M;
  p.x_vectorized = w.K % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0;

  const int64_t tiles = w.Kw / 32;
  int warps = config.warps_per_block;
  if (warps <= 0) warps = int(std::min<int64_t>(8, tiles));
  warps = std::clamp(warps, 1, kMaxWarps);
  const int64_t blocks = (w.N + kRowsPerBlock - 1) / kRowsPerBlock;
  const KernelFn kernel = act == DType::BF16 ? pick_kernel<true>(w.bits) : pick_kernel<false>(w.bits);
  kernel<<<dim3(unsigned(blocks)), dim3(unsigned(warps * 32)), 0, stream>>>(p);
  CHECK_LAST_LAUNCH("gemv_qn_kernel");
}

}  // namespace gemlite
