// kernels/parallel.h: the copy that uploads and weight stacking spread over the threads.
#include "kernels/parallel.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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

}  // namespace
}  // namespace gemlite
