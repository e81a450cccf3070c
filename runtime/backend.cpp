#include "runtime/backend.h"

#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"

namespace gemlite {

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda")
    throw Error("--device cuda: the CUDA backend is not implemented yet; use --device cpu");
  throw Error("--device '" + name + "': unknown backend (expected cpu or cuda)");
}

std::string default_backend_name() { return "cpu"; }

}  // namespace gemlite
