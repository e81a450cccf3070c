#pragma once
// f32 / f16 / bf16: the weight as is, rounded to the storage type.
// "weight" [N, K] F32/F16/BF16 (nn.Linear's layout).
#include <cstdint>
#include <vector>

#include "kernels/packed_weight.h"

namespace gemlite {

std::vector<PartSpec> dense_parts(const WeightFormat& format, int64_t N, int64_t K);
// Fills the part of `out` (allocated from dense_parts) from w.
void dense_quantize(const float* w,  // [N, K]
                    PackedWeight* out);
RowDecoder dense_row_decoder(const PackedWeight& w);

}  // namespace gemlite
