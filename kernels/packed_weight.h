#pragma once
// A linear layer's weight W [N out, K in] (PyTorch's nn.Linear layout) in one of the
// weight formats, as the tensors a packed checkpoint stores for it. Each format's
// quantizer builds one, its CPU reference reads it, and the GPU kernels upload it.
//
// Parts by format (names are the safetensors suffixes after "<module>."):
//   Dense  "weight"  [N, K] F32/F16/BF16
//   QN     "qweight" [N, Kw] I32  warp-strided words, see kernels/qn/qn_format.h
//          "scales"  [N, n_groups] F16,  "zeros" [N, n_groups] F16
//   S7     "qweight" [N, Kw] I32  see kernels/s7/s7_format.h
//          "scales"  [N, n_groups] F16,  "zeros" [N, n_groups] F16
//   FPX    "packed"  [ceil(N/16), ceil(K/128) * 256 * bits] U8, the GPU kernel's tile
//          order, see kernels/fpx/fpx_format.h;  "scales" [N] F16
// An optional "bias" [N] F32 (Qwen2's q/k/v) travels with any format.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/weight_format.h"
#include "runtime/host_tensor.h"

namespace gemlite {

struct PackedWeight {
  WeightFormat format;
  int64_t rows = 0;  // N, output features
  int64_t cols = 0;  // K, input features
  std::map<std::string, HostTensor> parts;

  const HostTensor& part(const std::string& name) const;  // throws Error when missing
  size_t nbytes() const;  // all parts, what a GEMV reads
};

// One tensor a format stores: what quantize_weight allocates and validate_packed_weight
// checks, so each format states its shapes in exactly one place.
struct PartSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};
// The parts of `format` for a [rows, cols] weight, without the optional "bias".
std::vector<PartSpec> expected_parts(const WeightFormat& format, int64_t rows, int64_t cols);

// The weights stacked along N: W [sum N_i, K] whose rows are parts[0]'s, then parts[1]'s...
// Every format stores its tensors row after row (FPX in blocks of kFpxTileRows rows), so
// this is a concatenation of each tensor along its first dimension; a missing "bias"
// becomes zeros when another part has one. Nothing when the parts cannot be stacked
// exactly: different formats, dtypes or K, tensors of the wrong shape, or an FPX part
// before the last whose N is not a multiple of 16 (its padded rows would land inside).
// Used to run q/k/v and gate/up as one launch each (runtime/fused_linear.h).
std::optional<PackedWeight> concat_rows(const std::vector<const PackedWeight*>& parts);

// Writes row n of the dequantized weight, out [K]. Made once per call from a weight with
// its tensors looked up, so a loop over rows pays no map lookups.
using RowDecoder = std::function<void(int64_t n, float* out)>;
RowDecoder make_row_decoder(const PackedWeight& w);

// Quantizes a float weight w [N, K] (row-major) into `format`.
PackedWeight quantize_weight(const float* w, int64_t N, int64_t K, const WeightFormat& format);
// A [rows, cols] weight of `format` with its parts allocated and zeroed, for a packer to fill.
PackedWeight allocate_packed_weight(const WeightFormat& format, int64_t rows, int64_t cols);

// CPU reference: row n of the dequantized weight, out [K].
void dequantize_row(const PackedWeight& w, int64_t n, float* out);

// CPU reference QuantLinear: y [M, N] = x [M, K] · Wᵀ (+ bias), fp32 accumulation,
// multi-threaded over output rows; each weight row is dequantized once per call.
void linear_reference(const PackedWeight& w, const float* x, int64_t M, float* y);

// Checks that the parts have the types and shapes the format requires; throws
// Error("<where>: ...") naming the tensor otherwise. Used by the checkpoint loader.
void validate_packed_weight(const PackedWeight& w, const std::string& where);

}  // namespace gemlite
