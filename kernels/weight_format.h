#pragma once
// The weight formats of the design, named as users write them on the command line and
// as they appear in a packed checkpoint's config.json:
//   qN, qNgG  N = 1..8 bits, asymmetric; per output channel (qN) or per group of G = 32,
//             64 or 128 input elements (qNgG). fp16 scale + zero per group:
//             w = (q - zero) * scale.
//   s7, s7gG  1:2 structured sparsity: of each pair of weights one is kept, as a 7-bit
//             asymmetric code (group G, default 128) plus a 1-bit position.
//   fp6, fp5  Quant-LLM floating-point codes e3m2 / e2m2 (no inf/NaN), one fp16 scale per
//             output row: w = decode(code) * scale.
//   f32, f16, bf16  dense.
#include <string>

#include "runtime/dtype.h"

namespace gemlite {

enum class FormatKind { Dense, QN, S7, FPX };

struct WeightFormat {
  FormatKind kind = FormatKind::Dense;
  DType dense_dtype = DType::F16;  // Dense only
  int bits = 0;                    // QN: 1..8; S7: 7; FPX: 1 + ebits + mbits
  int group = 0;                   // QN/S7: group size along K; 0 = per output channel
  int ebits = 0, mbits = 0;        // FPX only

  // Throws Error("unknown weight format '<s>' (expected ...)") on anything else.
  static WeightFormat parse(const std::string& s);
  std::string name() const;  // inverse of parse: "q4g64", "q8", "s7", "fp6", "f16"
  // Bits stored per weight including scales/zeros/positions, for K input elements per
  // row (what a GEMV must read per weight); used by the size and GB/s reports.
  double bits_per_weight(int64_t K) const;
};

// Formats are compared by name ("q4g64" == "q4g64").
inline bool operator==(const WeightFormat& a, const WeightFormat& b) { return a.name() == b.name(); }

}  // namespace gemlite
