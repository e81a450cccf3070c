#include "tests/gpu/reference_products.h"

#include <cmath>

namespace gemlite {

void reference_products(const PackedWeight& packed, const std::vector<double>& x, int64_t M, std::vector<double>* ref,
                        std::vector<double>* s) {
  reference_products(make_row_decoder(packed), packed.rows, packed.cols, x, M, ref, s);
}

void reference_products(const RowDecoder& decode, int64_t N, int64_t K, const std::vector<double>& x, int64_t M,
                        std::vector<double>* ref, std::vector<double>* s) {
  ref->assign(size_t(M * N), 0.0);
  s->assign(size_t(M * N), 0.0);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(K));  // per thread: row n of W, decoded once
#pragma omp for schedule(dynamic, 8)
    for (int64_t n = 0; n < N; ++n) {
      decode(n, row.data());
      for (int64_t m = 0; m < M; ++m) {
        double sum = 0, magnitude = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = x[size_t(m * K + k)] * double(row[size_t(k)]);
          sum += p;
          magnitude += std::abs(p);
        }
        (*ref)[size_t(m * N + n)] = sum;
        (*s)[size_t(m * N + n)] = magnitude;
      }
    }
  }
}

}  // namespace gemlite
