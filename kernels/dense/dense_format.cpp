#include "kernels/dense/dense_format.h"

#include <cstring>

#include "kernels/parallel.h"
#include "runtime/error.h"

namespace gemlite {

std::vector<PartSpec> dense_parts(const WeightFormat& format, int64_t N, int64_t K) {
  const DType t = format.dense_dtype;
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16)
    throw Error(std::string("dense weights are F32, F16 or BF16, not ") + dtype_name(t));
  return {{"weight", t, {N, K}}};
}

void dense_quantize(const float* w, PackedWeight* out) {
  HostTensor& weight = out->parts.at("weight");
  const int64_t count = weight.numel();
  switch (weight.dtype) {
    case DType::F32:
      parallel_copy(weight.mutable_as<float>(), w, weight.nbytes());
      break;
    case DType::F16: {
      uint16_t* out = weight.mutable_as<uint16_t>();
#pragma omp parallel for schedule(static) if (count >= kMinParallelWork)
      for (int64_t i = 0; i < count; ++i) out[i] = float_to_half(w[i]);
      break;
    }
    default: {  // BF16, as dense_parts allows no other
      uint16_t* out = weight.mutable_as<uint16_t>();
#pragma omp parallel for schedule(static) if (count >= kMinParallelWork)
      for (int64_t i = 0; i < count; ++i) out[i] = float_to_bf16(w[i]);
      break;
    }
  }
}

namespace {

// float of every fp16 bit pattern (256 KiB). Calling half_to_float (branches, no
// inlining) per element made f16 rows 4x slower to decode than bf16 ones (measured in
// linear_reference, 4096 x 4096); the lookup brings them close.
const float* half_to_float_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(1 << 16);
    for (uint32_t h = 0; h < t.size(); ++h) t[h] = half_to_float(uint16_t(h));
    return t;
  }();
  return table.data();
}

}  // namespace

RowDecoder dense_row_decoder(const PackedWeight& w) {
  const HostTensor& weight = w.part("weight");  // [N, K]
  const int64_t K = w.cols;
  const DType dtype = weight.dtype;
  const uint8_t* data = weight.data;
  const float* half_values = dtype == DType::F16 ? half_to_float_table() : nullptr;
  return [=](int64_t n, float* out) {
    if (dtype == DType::F32) {
      std::memcpy(out, reinterpret_cast<const float*>(data) + n * K, size_t(K) * sizeof(float));
      return;
    }
    const uint16_t* row = reinterpret_cast<const uint16_t*>(data) + n * K;
    if (dtype == DType::F16)
      for (int64_t k = 0; k < K; ++k) out[k] = half_values[row[k]];
    else
      for (int64_t k = 0; k < K; ++k) out[k] = bf16_to_float(row[k]);
  };
}

}  // namespace gemlite
