#include "runtime/backend.h"

#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#ifdef GEMLITE_WITH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace gemlite {

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options) {
  if (name == "cpu") return make_cpu_backend();
#ifdef GEMLITE_WITH_CUDA
  if (name == "cuda") return make_cuda_backend(options);  // throws Error naming why when no device
#else
  (void)options;
  if (name == "cuda")
    throw Error("--device cuda: this build has no CUDA (configure with nvcc, -DGEMLITE_CUDA=ON); use --device cpu");
#endif
  throw Error("--device '" + name + "': unknown backend (expected cpu or cuda)");
}

std::string default_backend_name() {
#ifdef GEMLITE_WITH_CUDA
  if (cuda_unavailable_reason().empty()) return "cuda";
#endif
  return "cpu";
}

DType parse_activation_type(const std::string& name) {
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  throw Error("--dtype '" + name + "': expected f16 or bf16");
}

}  // namespace gemlite
