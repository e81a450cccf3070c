#include "runtime/io/readable_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "runtime/error.h"

namespace gemlite {

void require_readable_file(const std::string& path) {
  if (std::FILE* file = std::fopen(path.c_str(), "rb")) {
    std::fclose(file);
    return;
  }
  const int err = errno;  // before anything else can change it
  fail(path, err == ENOENT ? std::string("no such file") : std::string("cannot open: ") + std::strerror(err));
}

}  // namespace gemlite
