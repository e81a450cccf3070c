#pragma once
// Where tests find the real models and texts (../shared beside the project; a missing
// file makes a test fail, never skip) and where they may write.
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace gemlite {

inline std::string shared_file(const std::string& relative_path) {
  return std::string(GEMLITE_SOURCE_DIR "/../shared/") + relative_path;
}

// A fresh empty directory under the system temp dir, e.g. /tmp/gemlite-test-Ab12Cd.
inline std::string make_temp_dir() {
  std::string pattern = "/tmp/gemlite-test-XXXXXX";
  if (!mkdtemp(pattern.data())) std::abort();
  return pattern;
}

}  // namespace gemlite
