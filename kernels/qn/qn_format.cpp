#include "kernels/qn/qn_format.h"

#include <algorithm>

#include "kernels/group_quant.h"
#include "kernels/parallel.h"
#include "runtime/error.h"

namespace gemlite {

int qn_codes_per_word(int bits) { return 32 / bits; }

int64_t qn_words_per_row(int64_t K, int bits) {
  const int64_t tile_elements = int64_t(kWarpLanes) * qn_codes_per_word(bits);
  return (K + tile_elements - 1) / tile_elements * kWarpLanes;
}

namespace {

// Where code k of a row lives: the word index within the row and the bit shift.
struct CodeSlot {
  int64_t word;
  int shift;
};
CodeSlot code_slot(int64_t k, int bits) {
  const int64_t tile_elements = int64_t(kWarpLanes) * qn_codes_per_word(bits);
  const int64_t within_tile = k % tile_elements;
  const int j = int(within_tile / kWarpLanes);
  return {k / tile_elements * kWarpLanes + within_tile % kWarpLanes, 32 - bits * (j + 1)};
}

}  // namespace

void qn_pack_row(const uint8_t* codes, int64_t K, int bits, int32_t* words) {
  // code_slot's layout walked tile by tile and code by code: code_slot per code (two 64-bit
  // divisions) had been 13 % of a synthetic q4g64 build's samples (perf, tinyllama-1.1b);
  // with quantize_to_code inline, the build's CPU time fell by 28 % (2 threads).
  const uint32_t mask = (1u << bits) - 1;
  const int E = qn_codes_per_word(bits);
  const int64_t Kw = qn_words_per_row(K, bits);
  std::fill(words, words + Kw, 0);
  for (int64_t tile = 0; tile * kWarpLanes < Kw; ++tile) {
    uint32_t* tile_words = reinterpret_cast<uint32_t*>(words) + tile * kWarpLanes;  // [32]
    for (int j = 0; j < E; ++j) {
      const int64_t k0 = (tile * E + j) * kWarpLanes;  // code j of lane 0: code_slot's inverse
      const int lanes = int(std::clamp<int64_t>(K - k0, 0, kWarpLanes));
      const int shift = 32 - bits * (j + 1);
      for (int lane = 0; lane < lanes; ++lane) tile_words[lane] |= (codes[k0 + lane] & mask) << shift;
    }
  }
}

void qn_unpack_row(const int32_t* words, int64_t K, int bits, uint8_t* codes) {
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t k = 0; k < K; ++k) {
    const CodeSlot slot = code_slot(k, bits);
    codes[k] = uint8_t(uint32_t(words[slot.word]) >> slot.shift & mask);
  }
}

std::vector<PartSpec> grouped_int32_parts(int64_t N, int64_t words_per_row, int64_t n_groups) {
  return {{"qweight", DType::I32, {N, words_per_row}},
          {"scales", DType::F16, {N, n_groups}},
          {"zeros", DType::F16, {N, n_groups}}};
}

std::vector<PartSpec> qn_parts(const WeightFormat& format, int64_t N, int64_t K) {
  if (format.bits < 1 || format.bits > 8 || format.group < 0 || format.group % kWarpLanes)
    throw Error("format " + format.name() + ": qN needs 1..8 bits and a group that is a multiple of 32");
  return grouped_int32_parts(N, qn_words_per_row(K, format.bits), group_count(format.group, K));
}

void qn_quantize(const float* w, PackedWeight* out) {
  const int bits = out->format.bits;
  const int64_t N = out->rows, K = out->cols;
  const int64_t G = group_size(out->format.group, K), n_groups = group_count(out->format.group, K);
  const int64_t Kw = qn_words_per_row(K, bits);
  int32_t* qweight = out->parts.at("qweight").mutable_as<int32_t>();  // [N, Kw]
  uint16_t* scales = out->parts.at("scales").mutable_as<uint16_t>();  // [N, n_groups]
  uint16_t* zeros = out->parts.at("zeros").mutable_as<uint16_t>();    // [N, n_groups]
#pragma omp parallel if (N * K >= kMinParallelWork)
  {
    std::vector<uint8_t> codes(K);  // one row's codes, per thread
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* row = w + n * K;
      for (int64_t g = 0; g < n_groups; ++g) {
        const int64_t begin = g * G, end = std::min(K, begin + G);
        const auto [lo, hi] = std::minmax_element(row + begin, row + end);
        const GroupQuantParams params = fit_group(*lo, *hi, bits);
        scales[n * n_groups + g] = float_to_half(params.scale);
        zeros[n * n_groups + g] = float_to_half(params.zero);
        for (int64_t k = begin; k < end; ++k) codes[k] = uint8_t(quantize_to_code(row[k], params, bits));
      }
      qn_pack_row(codes.data(), K, bits, qweight + n * Kw);
    }
  }
}

RowDecoder qn_row_decoder(const PackedWeight& w) {
  const int bits = w.format.bits;
  const int64_t K = w.cols;
  const int64_t G = group_size(w.format.group, K), n_groups = group_count(w.format.group, K);
  const int64_t Kw = qn_words_per_row(K, bits);
  const uint32_t* qweight = w.part("qweight").as<uint32_t>();  // [N, Kw]
  const uint16_t* scales = w.part("scales").as<uint16_t>();    // [N, n_groups]
  const uint16_t* zeros = w.part("zeros").as<uint16_t>();      // [N, n_groups]
  return [=](int64_t n, float* out) {
    const int codes_per_word = qn_codes_per_word(bits);
    const uint32_t mask = (1u << bits) - 1;
    for (int64_t tile = 0; tile * kWarpLanes < Kw; ++tile) {
      const uint32_t* words = qweight + n * Kw + tile * kWarpLanes;  // [32]
      for (int j = 0; j < codes_per_word; ++j) {
        const int64_t k0 = (tile * codes_per_word + j) * kWarpLanes;
        if (k0 >= K) return;
        const int64_t lanes = std::min<int64_t>(kWarpLanes, K - k0);
        const int64_t group = n * n_groups + k0 / G;
        const float scale = half_to_float(scales[group]), zero = half_to_float(zeros[group]);
        const int shift = 32 - bits * (j + 1);
        // One shift and one group for all lanes: a loop the compiler vectorises. The code
        // goes through int32 because SSE converts only signed integers to float.
        for (int64_t lane = 0; lane < lanes; ++lane)
          out[k0 + lane] = (float(int32_t(words[lane] >> shift & mask)) - zero) * scale;
      }
    }
  };
}

}  // namespace gemlite
