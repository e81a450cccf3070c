#include "kernels/packed_weight.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/dense/dense_format.h"
#include "kernels/fpx/fpx_format.h"
#include "kernels/group_quant.h"
#include "kernels/parallel.h"
#include "kernels/qn/qn_format.h"
#include "kernels/s7/s7_format.h"
#include "runtime/error.h"

namespace gemlite {

const HostTensor& PackedWeight::part(const std::string& name) const {
  const auto it = parts.find(name);
  if (it == parts.end())
    throw Error("weight in format " + format.name() + " has no tensor '" + name + "'");
  return it->second;
}

size_t PackedWeight::nbytes() const {
  size_t total = 0;
  for (const auto& [name, tensor] : parts) total += tensor.nbytes();
  return total;
}

std::vector<PartSpec> expected_parts(const WeightFormat& format, int64_t rows, int64_t cols) {
  switch (format.kind) {
    case FormatKind::Dense: return dense_parts(format, rows, cols);
    case FormatKind::QN: return qn_parts(format, rows, cols);
    case FormatKind::S7: return s7_parts(format, rows, cols);
    case FormatKind::FPX: return fpx_parts(format, rows, cols);
  }
  throw Error("unknown weight format kind");
}

RowDecoder make_row_decoder(const PackedWeight& w) {
  switch (w.format.kind) {
    case FormatKind::Dense: return dense_row_decoder(w);
    case FormatKind::QN: return qn_row_decoder(w);
    case FormatKind::S7: return s7_row_decoder(w);
    case FormatKind::FPX: return fpx_row_decoder(w);
  }
  throw Error("unknown weight format kind");
}

PackedWeight allocate_packed_weight(const WeightFormat& format, int64_t rows, int64_t cols) {
  PackedWeight packed;
  packed.format = format;
  packed.rows = rows;
  packed.cols = cols;
  for (const PartSpec& spec : expected_parts(format, rows, cols))
    packed.parts[spec.name] = HostTensor::zeros(spec.dtype, spec.shape);
  return packed;
}

namespace {

// A group whose range needs a scale beyond fp16 (a weight of 2e6 in q4: (2e6 - lo) / 15)
// was stored as inf, and the model then printed only <unk>. The quantizers write what they
// compute (an exception cannot leave their OpenMP loops), so their fp16 scales and zeros
// are checked here, after the loops: N * n_groups values, nothing next to the weights.
void check_scales_fit_fp16(const PackedWeight& packed, const float* w, const std::string& where) {
  for (const char* name : {"scales", "zeros"}) {
    const auto it = packed.parts.find(name);
    if (it == packed.parts.end()) continue;
    const int64_t i = first_non_finite(it->second);  // [N, n_groups], or [N] for FPX
    if (i < 0) continue;
    const int64_t K = packed.cols, n_groups = it->second.numel() / packed.rows;
    const int64_t n = i / n_groups, g = i % n_groups;
    const int64_t G = n_groups == 1 ? K : group_size(packed.format.group, K);
    float largest = 0;
    for (int64_t k = g * G; k < std::min(K, (g + 1) * G); ++k) largest = std::max(largest, std::abs(w[n * K + k]));
    fail(where, "row " + std::to_string(n) + ", group " + std::to_string(g) + ": the " +
                    (name == std::string("scales") ? "scale" : "zero") + " for weights up to " +
                    std::to_string(largest) + " does not fit fp16; use more bits or a dense format (bf16, f32) " +
                    "for this tensor (--override)");
  }
}

}  // namespace

PackedWeight quantize_weight(const float* w, int64_t N, int64_t K, const WeightFormat& format) {
  const std::string where = "quantize_weight (" + format.name() + ")";
  if (N < 1 || K < 1)
    fail(where, "weight shape [" + std::to_string(N) + ", " + std::to_string(K) + "] is empty");
  // fp16 storage would turn a weight beyond kHalfMax into infinity (the model then printed only <unk>).
  const float limit = format.kind == FormatKind::Dense && format.dense_dtype == DType::F16 ? kHalfMax : INFINITY;
  // The first bad weight, found by all threads (kernels/parallel.h says why the passes over a
  // whole weight are parallel).
  int64_t bad = N * K;
#pragma omp parallel for reduction(min : bad) schedule(static) if (N * K >= kMinParallelWork)
  for (int64_t i = 0; i < N * K; ++i)
    if (!(std::abs(w[i]) <= limit)) bad = std::min(bad, i);
  if (bad < N * K)
    fail(where, "weight [" + std::to_string(bad / K) + ", " + std::to_string(bad % K) + "] = " + std::to_string(w[bad]) +
                    (std::isfinite(w[bad]) ? " does not fit fp16 (use bf16 or f32)" : " is not finite"));
  PackedWeight packed = allocate_packed_weight(format, N, K);
  switch (format.kind) {
    case FormatKind::Dense: dense_quantize(w, &packed); break;
    case FormatKind::QN: qn_quantize(w, &packed); break;
    case FormatKind::S7: s7_quantize(w, &packed); break;
    case FormatKind::FPX: fpx_quantize(w, &packed); break;
  }
  check_scales_fit_fp16(packed, w, where);
  return packed;
}

std::optional<PackedWeight> concat_rows(const std::vector<const PackedWeight*>& parts) {
  if (parts.empty()) return std::nullopt;
  PackedWeight stacked;
  stacked.format = parts.front()->format;
  stacked.cols = parts.front()->cols;
  const int64_t row_block = stacked.format.kind == FormatKind::FPX ? kFpxTileRows : 1;
  bool any_bias = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PackedWeight& w = *parts[i];
    if (!(w.format == stacked.format) || w.cols != stacked.cols) return std::nullopt;
    if (i + 1 < parts.size() && w.rows % row_block != 0) return std::nullopt;
    stacked.rows += w.rows;
    any_bias = any_bias || w.parts.count("bias");
  }
  // Same format and K: every tensor has the same trailing dimensions, so stacking is
  // appending bytes, and the stacked sizes must come out as the format's own.
  for (const PartSpec& spec : expected_parts(stacked.format, stacked.rows, stacked.cols)) {
    HostTensor out = HostTensor::zeros(spec.dtype, spec.shape);
    size_t at = 0;
    for (const PackedWeight* w : parts) {
      const auto it = w->parts.find(spec.name);
      if (it == w->parts.end() || it->second.dtype != spec.dtype || at + it->second.nbytes() > out.nbytes())
        return std::nullopt;
      parallel_copy(out.mutable_as<uint8_t>() + at, it->second.data, it->second.nbytes());
      at += it->second.nbytes();
    }
    if (at != out.nbytes()) return std::nullopt;
    stacked.parts[spec.name] = std::move(out);
  }
  if (any_bias) {
    HostTensor bias = HostTensor::zeros(DType::F32, {stacked.rows});  // [N]
    int64_t row = 0;
    for (const PackedWeight* w : parts) {
      const auto it = w->parts.find("bias");
      if (it != w->parts.end() && (it->second.dtype != DType::F32 || it->second.numel() != w->rows))
        return std::nullopt;
      if (it != w->parts.end()) std::memcpy(bias.mutable_as<float>() + row, it->second.data, it->second.nbytes());
      row += w->rows;
    }
    stacked.parts["bias"] = std::move(bias);
  }
  return stacked;
}

void dequantize_row(const PackedWeight& w, int64_t n, float* out) { make_row_decoder(w)(n, out); }

namespace {

float dot(const float* a, const float* b, int64_t K) {  // a [K], b [K]
  // 16 partial sums vectorise into four SSE accumulators, so consecutive adds do not wait
  // on each other's latency: 1.4x over a single `omp simd` reduction (measured, K = 4096).
  constexpr int kPartials = 16;
  float partial[kPartials] = {};
  int64_t k = 0;
  for (; k + kPartials <= K; k += kPartials)
    for (int i = 0; i < kPartials; ++i) partial[i] += a[k + i] * b[k + i];
  float sum = 0;
  for (; k < K; ++k) sum += a[k] * b[k];
  for (int i = 0; i < kPartials; ++i) sum += partial[i];
  return sum;
}

}  // namespace

void linear_reference(const PackedWeight& w, const float* x, int64_t M, float* y) {
  const int64_t N = w.rows, K = w.cols;
  const auto bias_part = w.parts.find("bias");
  const float* bias = bias_part == w.parts.end() ? nullptr : bias_part->second.as<float>();  // [N]
  const RowDecoder decode_row = make_row_decoder(w);
#pragma omp parallel if (N * K * M >= kMinParallelWork)
  {
    std::vector<float> weight_row(K);  // per thread: row n of W, dequantized once
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      decode_row(n, weight_row.data());
      const float b = bias ? bias[n] : 0.0f;
      for (int64_t m = 0; m < M; ++m) y[m * N + n] = dot(weight_row.data(), x + m * K, K) + b;
    }
  }
}

void validate_packed_weight(const PackedWeight& w, const std::string& where) {
  if (w.rows < 1 || w.cols < 1)
    fail(where, "weight shape [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) + "] is empty");
  std::vector<PartSpec> specs;
  try {
    specs = expected_parts(w.format, w.rows, w.cols);
  } catch (const Error& e) {
    fail(where, e.what());
  }
  specs.push_back({"bias", DType::F32, {w.rows}});
  const std::string format = "format " + w.format.name();
  for (const PartSpec& spec : specs) {
    const auto it = w.parts.find(spec.name);
    if (it == w.parts.end()) {
      if (spec.name == "bias") continue;  // optional
      fail(where, "tensor '" + spec.name + "' is missing (" + format + ")");
    }
    const HostTensor& t = it->second;
    if (t.dtype != spec.dtype)
      fail(where, "tensor '" + spec.name + "' has type " + dtype_name(t.dtype) + ", expected " +
                      dtype_name(spec.dtype) + " (" + format + ")");
    if (t.shape != spec.shape) {
      HostTensor expected;
      expected.shape = spec.shape;
      fail(where, "tensor '" + spec.name + "' has shape " + t.shape_string() + ", expected " +
                      expected.shape_string() + " (" + format + ")");
    }
  }
  for (const auto& [name, tensor] : w.parts) {
    bool known = false;
    for (const PartSpec& spec : specs) known = known || spec.name == name;
    if (!known) fail(where, "unexpected tensor '" + name + "' (" + format + ")");
  }
  // The small parts only (a few bytes per group or row); a weight payload is left unread,
  // so loading stays a mapping of the file.
  for (const char* name : {"scales", "zeros", "bias"}) {
    const auto it = w.parts.find(name);
    if (it != w.parts.end()) check_finite(it->second, where, name);
  }
}

}  // namespace gemlite
