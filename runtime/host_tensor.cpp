#include "runtime/host_tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/parallel.h"
#include "runtime/error.h"

namespace gemlite {

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HostTensor HostTensor::zeros(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  // calloc, not a zero-filled vector: glibc hands large blocks out as fresh pages, already
  // zero, so nothing touches them here and the (parallel) quantizers that fill them take
  // the page faults on their own threads (kernels/parallel.h has the measurement).
  void* storage = std::calloc(std::max<size_t>(t.nbytes(), 1), 1);
  if (!storage) throw std::bad_alloc();
  t.data = static_cast<const uint8_t*>(storage);
  t.owner = std::shared_ptr<const void>(storage, [](const void* p) { std::free(const_cast<void*>(p)); });
  return t;
}

HostTensor HostTensor::copy_of(DType dtype, std::vector<int64_t> shape, const void* bytes) {
  HostTensor t = zeros(dtype, std::move(shape));
  if (t.nbytes()) std::memcpy(t.mutable_as<uint8_t>(), bytes, t.nbytes());
  return t;
}

std::vector<float> HostTensor::to_float() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  const int64_t n = numel();
  // Whole weights pass through here on their way to the quantizers: spread over the threads.
  switch (dtype) {
    case DType::F32:
      if (!out.empty()) std::memcpy(out.data(), data, out.size() * 4);
      break;
    case DType::F16:
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
      for (int64_t i = 0; i < n; ++i) out[size_t(i)] = half_to_float(as<uint16_t>()[i]);
      break;
    case DType::BF16:
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
      for (int64_t i = 0; i < n; ++i) out[size_t(i)] = bf16_to_float(as<uint16_t>()[i]);
      break;
    default:
      throw Error(std::string("tensor of type ") + dtype_name(dtype) +
                  " cannot be read as floating point");
  }
  return out;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string HostTensor::shape_string() const { return gemlite::shape_string(shape); }

}  // namespace gemlite
