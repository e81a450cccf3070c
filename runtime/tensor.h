#pragma once
// A 2-D tensor living on a backend (host memory for the CPU backend, device memory for
// CUDA). Activations are [tokens, features]; 1-D weights (norms) are [1, features].
// Storage is shared, so copies of a Tensor are cheap views of the same memory.
#include <cstdint>
#include <memory>

#include "runtime/dtype.h"

namespace gemlite {

struct Tensor {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  void* data = nullptr;
  std::shared_ptr<void> storage;

  int64_t numel() const { return rows * cols; }
  template <typename T> T* as() const { return static_cast<T*>(data); }
  // Rows [first, first + count) as a view.
  Tensor slice_rows(int64_t first, int64_t count) const {
    Tensor view = *this;
    view.rows = count;
    view.data = static_cast<uint8_t*>(data) + first * cols * int64_t(dtype_size(dtype));
    return view;
  }
};

}  // namespace gemlite
