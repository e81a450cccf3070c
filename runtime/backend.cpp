#include "runtime/backend.h"

#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#ifdef GEMLITE_WITH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace gemlite {

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
#ifdef GEMLITE_WITH_CUDA
  if (name == "cuda") return make_cuda_backend();  // throws Error naming why when no device
#else
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

}  // namespace gemlite
