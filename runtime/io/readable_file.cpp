#include "runtime/io/readable_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "runtime/error.h"

namespace gemlite {

void require_readable_file(const std::string& path) {
  std::error_code code;
  const std::filesystem::file_status status = std::filesystem::status(path, code);  // follows links
  if (!code && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    fail(path, "not a regular file");
  if (std::FILE* file = std::fopen(path.c_str(), "rb")) {
    std::fclose(file);
    return;
  }
  const int err = errno;  // before anything else can change it
  fail(path, err == ENOENT ? std::string("no such file") : std::string("cannot open: ") + std::strerror(err));
}

std::filesystem::file_type file_type_at(const std::string& path) {
  std::error_code code;
  const std::filesystem::file_status status = std::filesystem::status(path, code);
  // A missing file or a missing folder on the way is an answer, not a failure.
  if (status.type() == std::filesystem::file_type::not_found) return status.type();
  if (code) fail(path, "cannot access: " + code.message());
  return status.type();
}

}  // namespace gemlite
