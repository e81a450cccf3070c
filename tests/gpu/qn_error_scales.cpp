#include "tests/gpu/qn_error_scales.h"

#include <cmath>

#include "kernels/group_quant.h"
#include "kernels/qn/qn_format.h"
#include "runtime/dtype.h"

namespace gemlite {

ErrorScales error_scales(const PackedWeight& w, const std::vector<float>& x, int64_t M) {
  const int64_t N = w.rows, K = w.cols, Kw = qn_words_per_row(K, w.format.bits);
  const int64_t G = group_size(w.format.group, K), n_groups = group_count(w.format.group, K);
  const RowDecoder decode = make_row_decoder(w);
  const uint16_t* scales = w.part("scales").as<uint16_t>();
  const uint16_t* zeros = w.part("zeros").as<uint16_t>();
  const int32_t* qweight = w.part("qweight").as<int32_t>();
  ErrorScales out{std::vector<float>(size_t(M * N)), std::vector<float>(size_t(M * N))};
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(K)), terms(static_cast<size_t>(K));  // per thread
    std::vector<uint8_t> codes(static_cast<size_t>(K));
#pragma omp for schedule(dynamic, 8)
    for (int64_t n = 0; n < N; ++n) {
      decode(n, row.data());
      qn_unpack_row(qweight + n * Kw, K, w.format.bits, codes.data());
      for (int64_t k = 0; k < K; ++k) {
        const float s = half_to_float(scales[n * n_groups + k / G]), z = half_to_float(zeros[n * n_groups + k / G]);
        terms[size_t(k)] = std::abs(row[size_t(k)]) + std::abs(codes[size_t(k)] * s) + std::abs(z * s);
      }
      for (int64_t m = 0; m < M; ++m) {
        double plain = 0, dequant = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double ax = std::abs(double(x[size_t(m * K + k)]));
          plain += ax * std::abs(row[size_t(k)]);
          dequant += ax * terms[size_t(k)];
        }
        out.plain[size_t(m * N + n)] = float(plain);
        out.dequant[size_t(m * N + n)] = float(dequant);
      }
    }
  }
  return out;
}

}  // namespace gemlite
