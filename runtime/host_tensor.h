#pragma once
// A tensor in host memory: either a view into a memory-mapped checkpoint (kept alive by
// `owner`) or its own bytes. Weights flow through the project as HostTensors, so loading
// a packed checkpoint copies nothing.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace gemlite {

// "[4096, 11008]": a shape as errors name it.
std::string shape_string(const std::vector<int64_t>& shape);

struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;     // nbytes() bytes
  std::shared_ptr<const void> owner; // keeps `data` valid (an mmap or a byte vector)

  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  template <typename T> const T* as() const { return reinterpret_cast<const T*>(data); }

  // A tensor that owns zero-initialised storage of the given type and shape.
  static HostTensor zeros(DType dtype, std::vector<int64_t> shape);
  // A tensor that owns a copy of `bytes`.
  static HostTensor copy_of(DType dtype, std::vector<int64_t> shape, const void* bytes);
  // Writable pointer; only for tensors created by zeros()/copy_of() (owned storage).
  template <typename T> T* mutable_as() { return const_cast<T*>(as<T>()); }

  // Converts F32/F16/BF16 elements to float (throws Error for integer types).
  std::vector<float> to_float() const;
  float float_at(int64_t i) const;  // element i of an F32/F16/BF16 tensor
  std::string shape_string() const;  // "[4096, 11008]"
};

// The index of the first NaN or infinite element of an F32/F16/BF16 tensor, or -1 when all
// are finite (throws Error for integer types).
int64_t first_non_finite(const HostTensor& t);
// Throws Error("<where>: tensor '<name>': value <v> at <index> is not finite") for the first
// such element. Loaders check the small tensors (norms, biases, scales) with it: a NaN
// there made every logit NaN, and the programs printed garbage with exit code 0.
void check_finite(const HostTensor& t, const std::string& where, const std::string& name);

}  // namespace gemlite
