#include "runtime/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace gemlite {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO blocks until a writer comes (the audit's hang); it is refused
  // below as not a regular file. Reads of regular files ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));

  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    fail(path, "cannot open: not a regular file");
  }
  const size_t size = size_t(info.st_size);

  // mmap rejects a zero length; an empty file simply has no bytes to view.
  void* mapping = nullptr;
  if (size > 0) {
    mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      const int mmap_errno = errno;
      ::close(fd);
      fail(path, std::string("cannot map into memory: ") + std::strerror(mmap_errno));
    }
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  return std::shared_ptr<const MappedFile>(
      new MappedFile(path, static_cast<const uint8_t*>(mapping), size));
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void check_no_overlap(const std::string& path, std::vector<ByteRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
  const ByteRange* previous = nullptr;
  for (const ByteRange& r : ranges) {
    if (r.begin == r.end) continue;  // an empty tensor occupies no bytes
    if (previous && r.begin < previous->end)
      fail(path, "tensors '" + previous->name + "' and '" + r.name + "' overlap in the data section");
    if (!previous || r.end > previous->end) previous = &r;
  }
}

}  // namespace gemlite
