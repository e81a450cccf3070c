#include "kernels/s7/s7_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/group_quant.h"
#include "kernels/parallel.h"
#include "kernels/qn/qn_format.h"
#include "runtime/error.h"

namespace gemlite {

namespace {

constexpr int kValueBits = 7;
constexpr int kPairSpan = 2 * kWarpLanes;  // K elements covered by 32 consecutive pairs

// Pairs per row, padding included: every 64-element block of K holds 32 pairs.
int64_t pairs_per_row(int64_t K) { return (K + kPairSpan - 1) / kPairSpan * kWarpLanes; }

int64_t first_of_pair(int64_t p) { return p / kWarpLanes * kPairSpan + p % kWarpLanes; }

// `value` when keep is 1, +0 when it is 0, by masking the bits. Written as
// `keep ? value : 0.0f`, GCC (under its default -ftrapping-math) keeps a branch, which the
// random position bits mispredict half the time (10x slower) and which blocks vectorising.
inline float value_or_zero(float value, uint32_t keep) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits &= 0u - keep;
  std::memcpy(&value, &bits, sizeof bits);
  return value;
}

}  // namespace

int64_t s7_words_per_row(int64_t K) { return qn_words_per_row(pairs_per_row(K), 8); }

std::vector<PartSpec> s7_parts(const WeightFormat& format, int64_t N, int64_t K) {
  if (format.bits != kValueBits || format.group <= 0 || format.group % kPairSpan)
    throw Error("format " + format.name() + ": s7 needs 7 bits and a group that is a multiple of 64");
  return grouped_int32_parts(N, s7_words_per_row(K), group_count(format.group, K));
}

void s7_quantize(const float* w, PackedWeight* out) {
  const int64_t N = out->rows, K = out->cols;
  const int64_t G = out->format.group, n_groups = group_count(out->format.group, K);
  const int64_t n_pairs = pairs_per_row(K), Kw = s7_words_per_row(K);
  int32_t* qweight = out->parts.at("qweight").mutable_as<int32_t>();  // [N, Kw]
  uint16_t* scales = out->parts.at("scales").mutable_as<uint16_t>();  // [N, n_groups]
  uint16_t* zeros = out->parts.at("zeros").mutable_as<uint16_t>();    // [N, n_groups]
#pragma omp parallel if (N * K >= kMinParallelWork)
  {
    // Per thread, one row's worth: [n_pairs] each, [n_groups] each.
    std::vector<float> kept(n_pairs);
    std::vector<uint8_t> bytes(n_pairs);
    std::vector<float> lo(n_groups), hi(n_groups);
    std::vector<GroupQuantParams> params(n_groups);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* row = w + n * K;
      std::fill(bytes.begin(), bytes.end(), 0);  // pairs that start beyond K stay 0
      std::fill(lo.begin(), lo.end(), std::numeric_limits<float>::infinity());
      std::fill(hi.begin(), hi.end(), -std::numeric_limits<float>::infinity());
      for (int64_t p = 0; p < n_pairs && first_of_pair(p) < K; ++p) {
        const int64_t k0 = first_of_pair(p), k1 = k0 + kWarpLanes;
        const float a = row[k0], b = k1 < K ? row[k1] : 0.0f;
        const bool first_kept = std::abs(a) >= std::abs(b);
        kept[p] = first_kept ? a : b;
        bytes[p] = uint8_t(first_kept << kValueBits);
        const int64_t g = k0 / G;
        lo[g] = std::min(lo[g], kept[p]);
        hi[g] = std::max(hi[g], kept[p]);
      }
      // Every group holds at least one pair (groups start at multiples of 64 below K).
      for (int64_t g = 0; g < n_groups; ++g) {
        params[g] = fit_group(lo[g], hi[g], kValueBits);
        scales[n * n_groups + g] = float_to_half(params[g].scale);
        zeros[n * n_groups + g] = float_to_half(params[g].zero);
      }
      for (int64_t p = 0; p < n_pairs && first_of_pair(p) < K; ++p)
        bytes[p] |= uint8_t(quantize_to_code(kept[p], params[first_of_pair(p) / G], kValueBits));
      qn_pack_row(bytes.data(), n_pairs, 8, qweight + n * Kw);
    }
  }
}

RowDecoder s7_row_decoder(const PackedWeight& w) {
  const int64_t K = w.cols;
  const int64_t G = w.format.group, n_groups = group_count(w.format.group, K);
  const int64_t Kw = s7_words_per_row(K);
  const uint32_t* qweight = w.part("qweight").as<uint32_t>();  // [N, Kw]
  const uint16_t* scales = w.part("scales").as<uint16_t>();    // [N, n_groups]
  const uint16_t* zeros = w.part("zeros").as<uint16_t>();      // [N, n_groups]
  return [=](int64_t n, float* out) {
    constexpr int kPairsPerWord = 4;
    for (int64_t tile = 0; tile * kWarpLanes < Kw; ++tile) {
      const uint32_t* words = qweight + n * Kw + tile * kWarpLanes;  // [32]
      for (int j = 0; j < kPairsPerWord; ++j) {
        const int64_t k0 = (tile * kPairsPerWord + j) * kPairSpan;  // first k of lane 0
        if (k0 >= K) return;
        const int64_t group = n * n_groups + k0 / G;
        const float scale = half_to_float(scales[group]), zero = half_to_float(zeros[group]);
        const int shift = 24 - 8 * j;
        auto kept_value = [&](uint32_t byte) {
          return (float(int32_t(byte & 0x7f)) - zero) * scale;
        };
        // Two plain loops, one per half of the pairs, so that each vectorises.
        const int64_t first_lanes = std::min<int64_t>(kWarpLanes, K - k0);
        for (int64_t lane = 0; lane < first_lanes; ++lane) {
          const uint32_t byte = words[lane] >> shift & 0xff;
          out[k0 + lane] = value_or_zero(kept_value(byte), byte >> kValueBits);
        }
        const int64_t second_lanes = std::min<int64_t>(kWarpLanes, K - k0 - kWarpLanes);
        for (int64_t lane = 0; lane < second_lanes; ++lane) {
          const uint32_t byte = words[lane] >> shift & 0xff;
          out[k0 + kWarpLanes + lane] = value_or_zero(kept_value(byte), (byte >> kValueBits) ^ 1);
        }
      }
    }
  };
}

}  // namespace gemlite
