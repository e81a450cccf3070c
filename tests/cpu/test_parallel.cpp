// The passes over whole tensors that run on all threads: kernels/parallel.h's copy, and
// first_non_finite (runtime/host_tensor.h), the load-time scan of scales and norms.
#include "kernels/parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/host_tensor.h"

namespace gemlite {
namespace {

// Several 1 MiB pieces and a partial last one, each byte distinct from its neighbours'
// positions in other pieces, so a piece copied to the wrong place or twice shows.
TEST(ParallelCopy, CopiesEveryByteOfABufferOfSeveralPieces) {
  const size_t bytes = (size_t(3) << 20) + 12345;
  std::vector<uint8_t> source(bytes), copy(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) source[i] = uint8_t(i * 2654435761u >> 13);
  parallel_copy(copy.data(), source.data(), bytes);
  EXPECT_EQ(copy, source);
  std::vector<uint8_t> small(7, 0);  // one piece
  parallel_copy(small.data(), source.data(), small.size());
  EXPECT_EQ(small, std::vector<uint8_t>(source.begin(), source.begin() + 7));
  parallel_copy(small.data(), source.data(), 0);  // nothing, and no access
}

// Several blocks of the scan on several threads: the first non-finite element in index
// order is found, whichever thread sees one first, in each floating-point type.
TEST(FirstNonFinite, FindsTheFirstOfSeveralInALargeTensor) {
  const int64_t n = int64_t(1) << 20;
  for (const DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    HostTensor t = HostTensor::zeros(dtype, {n});
    EXPECT_EQ(first_non_finite(t), -1) << dtype_name(dtype);
    const auto set = [&](int64_t i, float value) {
      if (dtype == DType::F32) t.mutable_as<float>()[i] = value;
      else t.mutable_as<uint16_t>()[i] = dtype == DType::F16 ? float_to_half(value) : float_to_bf16(value);
    };
    set(n - 3, NAN);  // in the last thread's blocks
    set(700001, -INFINITY);
    set(5, 1e30f);  // finite in f32 and bf16, inf in f16
    EXPECT_EQ(first_non_finite(t), dtype == DType::F16 ? 5 : 700001) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace gemlite
