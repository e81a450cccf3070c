#pragma once
// Checks on imported models shared by the importer tests.
#include <gtest/gtest.h>

#include <cstring>

#include "models/source_model.h"

namespace gemlite {

// `got` holds exactly the tensors of `want` (the same names), each of the same shape, type
// and bytes: two routes to the same model (Phi-3's fused tensors split back, say).
inline void expect_same_tensors(const SourceModel& got, const SourceModel& want) {
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  for (const auto& [name, expected] : want.tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.tensors.count(name));
    const HostTensor& t = got.tensors.at(name);
    ASSERT_EQ(t.shape, expected.shape);
    ASSERT_EQ(t.dtype, expected.dtype);
    EXPECT_EQ(0, std::memcmp(t.data, expected.data, expected.nbytes()));
  }
}

}  // namespace gemlite
