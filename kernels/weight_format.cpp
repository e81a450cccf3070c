#include "kernels/weight_format.h"

#include <regex>

#include "kernels/packed_weight.h"
#include "runtime/error.h"

namespace gemlite {

namespace {

constexpr int kS7DefaultGroup = 128;

const char* const kValidForms =
    "qN or qNgG with N = 1..8 and G = 32, 64 or 128; s7 or s7gG with G = 64 or 128; "
    "fp6; fp5; f32; f16; bf16";

WeightFormat dense(DType t) {
  WeightFormat f;
  f.kind = FormatKind::Dense;
  f.dense_dtype = t;
  return f;
}

WeightFormat fpx(int ebits, int mbits) {
  WeightFormat f;
  f.kind = FormatKind::FPX;
  f.ebits = ebits;
  f.mbits = mbits;
  f.bits = 1 + ebits + mbits;
  return f;
}

WeightFormat grouped(FormatKind kind, int bits, int group) {
  WeightFormat f;
  f.kind = kind;
  f.bits = bits;
  f.group = group;
  return f;
}

}  // namespace

WeightFormat WeightFormat::parse(const std::string& s) {
  static const std::regex qn("q([1-8])(?:g(32|64|128))?");
  static const std::regex s7("s7(?:g(64|128))?");
  std::smatch m;
  if (std::regex_match(s, m, qn))
    return grouped(FormatKind::QN, std::stoi(m[1]), m[2].matched ? std::stoi(m[2]) : 0);
  if (std::regex_match(s, m, s7))
    return grouped(FormatKind::S7, 7, m[1].matched ? std::stoi(m[1]) : kS7DefaultGroup);
  if (s == "fp6") return fpx(3, 2);
  if (s == "fp5") return fpx(2, 2);
  if (s == "f32") return dense(DType::F32);
  if (s == "f16") return dense(DType::F16);
  if (s == "bf16") return dense(DType::BF16);
  throw Error("unknown weight format '" + s + "' (expected " + kValidForms + ")");
}

std::string WeightFormat::name() const {
  switch (kind) {
    case FormatKind::Dense:
      return dense_dtype == DType::F32 ? "f32" : dense_dtype == DType::BF16 ? "bf16" : "f16";
    case FormatKind::QN:
      return "q" + std::to_string(bits) + (group ? "g" + std::to_string(group) : "");
    case FormatKind::S7:
      return group == kS7DefaultGroup ? "s7" : "s7g" + std::to_string(group);
    case FormatKind::FPX:
      if (ebits == 3 && mbits == 2) return "fp6";
      if (ebits == 2 && mbits == 2) return "fp5";
      // Codes the parser does not name; spelled out so a report still says what they are.
      return "fp" + std::to_string(bits) + "e" + std::to_string(ebits) + "m" + std::to_string(mbits);
  }
  return "?";
}

double WeightFormat::bits_per_weight(int64_t K) const {
  // The stored parts of 16 rows (fp6/fp5 pack rows in blocks of 16), from the same shapes
  // the quantizer allocates.
  constexpr int64_t kRows = 16;
  size_t bytes = 0;
  for (const PartSpec& spec : expected_parts(*this, kRows, K)) {
    size_t count = 1;
    for (int64_t d : spec.shape) count *= size_t(d);
    bytes += count * dtype_size(spec.dtype);
  }
  return 8.0 * double(bytes) / double(kRows * K);
}

}  // namespace gemlite
