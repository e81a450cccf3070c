#pragma once
// safetensors: an 8-byte little-endian header length, a JSON header mapping tensor names
// to {dtype, shape, data_offsets} (plus an optional "__metadata__" string map), then the
// data. The reader memory-maps the file and checks every length and offset before any
// tensor is touched; the writer writes to a temporary name and renames it into place.
#include <map>
#include <string>
#include <vector>

#include "runtime/host_tensor.h"

namespace gemlite {

class SafetensorsFile {
 public:
  // Throws Error("<path>: <problem>") for a missing, truncated or malformed file.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws Error("<path>: no tensor '<name>'") when absent. The tensor views the mapping.
  const HostTensor& get(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  std::map<std::string, HostTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
 public:
  // Keeps a reference to `tensor` (its owner keeps the bytes alive) until write().
  void add(const std::string& name, const HostTensor& tensor);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Writes <path>.tmp-XXXXXX (mkstemp), then renames it to <path>; throws Error naming the path on failure
  // and leaves no partial file behind.
  void write(const std::string& path) const;

 private:
  std::map<std::string, HostTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace gemlite
