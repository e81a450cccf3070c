#include "runtime/host_tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/parallel.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

[[noreturn]] void not_floating_point(DType dtype) {
  throw Error(std::string("tensor of type ") + dtype_name(dtype) + " cannot be read as floating point");
}

}  // namespace

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HostTensor HostTensor::zeros(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  // calloc, not a zero-filled vector: glibc serves blocks above its mmap threshold (128 KiB,
  // raised up to 32 MiB by large frees) as fresh zero pages that nothing touches here, so
  // the (parallel) quantizers that fill them take the page faults on their own threads
  // (kernels/parallel.h has the measurement); smaller blocks it clears itself.
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
      not_floating_point(dtype);
  }
  return out;
}

float HostTensor::float_at(int64_t i) const {
  switch (dtype) {
    case DType::F32: return as<float>()[i];
    case DType::F16: return half_to_float(as<uint16_t>()[i]);
    case DType::BF16: return bf16_to_float(as<uint16_t>()[i]);
    default:
      not_floating_point(dtype);
  }
}

int64_t first_non_finite(const HostTensor& t) {
  // All exponent bits set is inf or NaN in each format. Blocks without an early exit
  // vectorise, on all threads (checkpoint scales run to gigabytes at group 32); only a
  // block with a hit is searched, and the first such index wins.
  auto scan = [&](auto bits, auto exponent) -> int64_t {
    constexpr int64_t kBlock = 4096;
    const int64_t n = t.numel(), blocks = (n + kBlock - 1) / kBlock;
    int64_t first = n;
#pragma omp parallel for reduction(min : first) schedule(static) if (n >= kMinParallelWork)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
      bool any = false;
      for (int64_t i = begin; i < end; ++i) any |= (bits[i] & exponent) == exponent;
      if (!any) continue;
      for (int64_t i = begin; i < end; ++i)
        if ((bits[i] & exponent) == exponent) {
          first = std::min(first, i);
          break;
        }
    }
    return first < n ? first : int64_t(-1);
  };
  switch (t.dtype) {
    case DType::F32: return scan(t.as<uint32_t>(), 0x7f800000u);
    case DType::F16: return scan(t.as<uint16_t>(), uint16_t(0x7c00));
    case DType::BF16: return scan(t.as<uint16_t>(), uint16_t(0x7f80));
    default:
      not_floating_point(t.dtype);
  }
}

void check_finite(const HostTensor& t, const std::string& where, const std::string& name) {
  const int64_t i = first_non_finite(t);
  if (i >= 0)
    fail(where, "tensor '" + name + "': value " + std::to_string(t.float_at(i)) + " at " + std::to_string(i) +
                    " is not finite");
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string HostTensor::shape_string() const { return gemlite::shape_string(shape); }

}  // namespace gemlite
