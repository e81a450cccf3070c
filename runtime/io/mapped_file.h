#pragma once
// A whole file mapped read-only into memory. Checkpoints are read through mappings so that
// their tensors can be used in place: HostTensors view the mapping and hold a shared_ptr
// to it as their owner, so the file stays mapped exactly as long as a tensor needs it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gemlite {

class MappedFile {
 public:
  // Throws Error("<path>: <problem>") when the file cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }  // nullptr for an empty file
  size_t size() const { return size_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

// A named span [begin, end) of a file's data section: one tensor's bytes.
struct ByteRange {
  std::string name;
  uint64_t begin, end;
};
// Throws Error("<path>: tensors '<a>' and '<b>' overlap in the data section") when two
// ranges share a byte: a corrupt header (safetensors and GGUF readers both check it).
// Gaps between ranges are harmless; an empty range occupies no bytes.
void check_no_overlap(const std::string& path, std::vector<ByteRange> ranges);

}  // namespace gemlite
