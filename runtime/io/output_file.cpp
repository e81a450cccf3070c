#include "runtime/io/output_file.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/error.h"
#include "runtime/io/readable_file.h"

namespace gemlite {

void check_output_file(const std::string& path) {
  if (path.empty()) fail("output file ''", "empty name");
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::symlink_status(path, error);
  if (!error && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    fail(path, "exists and is not a regular file (a directory, device or link); refusing to replace it");
}

void check_replaceable_output(const std::string& path, const std::string& what,
                              const std::function<bool(const std::string&)>& is_earlier_output) {
  check_output_file(path);
  if (path_exists(path) && !is_earlier_output(path))
    fail(path, "exists and is not " + what + ": not replaced (remove it or name another file)");
}

std::string make_temp_file_beside(const std::string& path) {
  std::string name = path + ".tmp-XXXXXX";
  const int fd = mkstemp(name.data());
  if (fd < 0) fail(path, "cannot create " + name + ": " + std::strerror(errno));
  fchmod(fd, plain_mode(0666));
  close(fd);
  return name;
}

unsigned plain_mode(unsigned requested) {
  const mode_t mask = umask(0);  // reading the umask means setting it: set it back
  umask(mask);
  return requested & ~unsigned(mask);
}

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  check_output_file(path_);
  temp_path_ = make_temp_file_beside(path_);
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (!file_) {
    std::remove(temp_path_.c_str());
    fail(path_, "cannot write " + temp_path_ + ": " + std::strerror(errno));
  }
}

AtomicFile::~AtomicFile() {
  if (file_) std::fclose(file_);
  if (!committed_) std::remove(temp_path_.c_str());
}

void AtomicFile::write(const void* bytes, size_t size) {
  if (size > 0 && std::fwrite(bytes, 1, size, file_) != size)
    fail(path_, std::string("write failed: ") + std::strerror(errno));
}

void AtomicFile::commit() {
  std::FILE* file = file_;
  file_ = nullptr;
  if (std::fclose(file) != 0) fail(path_, std::string("write failed: ") + std::strerror(errno));
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail(path_, "cannot rename " + temp_path_ + " into place: " + std::strerror(errno));
  committed_ = true;
}

}  // namespace gemlite
