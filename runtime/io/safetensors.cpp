#include "runtime/io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/interrupt.h"
#include "runtime/io/json_file.h"
#include "runtime/io/mapped_file.h"
#include "runtime/io/output_file.h"

namespace gemlite {
using nlohmann::json;

namespace {

constexpr size_t kLengthFieldBytes = 8;
// Real headers are kilobytes; a length beyond this means the file is not safetensors.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr const char* kMetadataKey = "__metadata__";

uint64_t read_le64(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

void write_le64(uint64_t value, uint8_t* bytes) {
  for (int i = 0; i < 8; ++i) bytes[i] = uint8_t(value >> (8 * i));
}

// One header entry, checked against the data section but not yet against its neighbours.
struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // offsets into the data section
};

json parse_header(const std::string& path, const uint8_t* text, uint64_t size) {
  json header;
  try {
    header = json::parse(text, text + size);
  } catch (const json::parse_error& e) {
    fail(path, "header is not valid JSON (syntax error at byte " + std::to_string(e.byte) + ")");
  } catch (const json::exception& e) {  // e.g. a number out of range: 1e999
    fail(path, "header is not valid JSON (" + json_error_text(e) + ")");
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  return header;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& metadata) {
  const bool string_map =
      metadata.is_object() && std::all_of(metadata.begin(), metadata.end(),
                                          [](const json& value) { return value.is_string(); });
  if (!string_map) fail(path, std::string(kMetadataKey) + " must map strings to strings");
  return metadata.get<std::map<std::string, std::string>>();
}

TensorEntry parse_entry(const std::string& path, const std::string& name, const json& entry,
                        uint64_t data_size) {
  auto bad = [&](const std::string& problem) { fail(path, "tensor '" + name + "': " + problem); };
  if (!entry.is_object()) bad("entry must be an object with dtype, shape and data_offsets");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) bad(std::string("missing '") + key + "'");

  TensorEntry t;
  t.name = name;
  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) bad("'dtype' must be a string");
  if (!dtype_from_name(dtype.get<std::string>(), &t.dtype))
    bad("unsupported dtype '" + dtype.get<std::string>() + "' (supported: F32, F16, BF16, I32, I8, U8)");

  const json& shape = entry["shape"];
  if (!shape.is_array()) bad("'shape' must be an array of integers");
  for (const json& dim : shape) {
    if (!dim.is_number_integer()) bad("'shape' must be an array of integers");
    if (!dim.is_number_unsigned()) bad("negative dimension in shape " + shape.dump());
    if (dim.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      bad("dimension too large in shape " + shape.dump());
    t.shape.push_back(dim.get<int64_t>());
  }

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_integer() ||
      !offsets[1].is_number_integer())
    bad("'data_offsets' must be an array of two integers");
  const std::string offsets_text = "data_offsets " + offsets.dump();
  if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned() ||
      offsets[1].get<uint64_t>() > data_size)
    bad(offsets_text + " out of range of the " + std::to_string(data_size) + "-byte data section");
  t.begin = offsets[0].get<uint64_t>();
  t.end = offsets[1].get<uint64_t>();
  if (t.begin > t.end) bad(offsets_text + ": begin > end");

  // Overflow here can only come from a nonsense shape; it cannot match the offsets anyway.
  uint64_t expected_bytes = dtype_size(t.dtype);
  bool overflow = false;
  for (int64_t dim : t.shape)
    overflow |= __builtin_mul_overflow(expected_bytes, uint64_t(dim), &expected_bytes);
  if (overflow || expected_bytes != t.end - t.begin)
    bad(offsets_text + " hold " + std::to_string(t.end - t.begin) + " bytes but shape " +
        shape.dump() + " of " + dtype.get<std::string>() + " needs " +
        (overflow ? std::string("more than 2^64") : std::to_string(expected_bytes)));
  return t;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  const std::shared_ptr<const MappedFile> file = MappedFile::open(path);
  if (file->size() < kLengthFieldBytes)
    fail(path, "file is shorter than 8 bytes (" + std::to_string(file->size()) +
                   " bytes): not a safetensors file");
  const uint64_t header_size = read_le64(file->data());
  if (header_size > kMaxHeaderBytes)
    fail(path, "header length " + std::to_string(header_size) +
                   " is too large (over 100 MB); not a safetensors file?");
  if (header_size > file->size() - kLengthFieldBytes)
    fail(path, "header length " + std::to_string(header_size) + " runs past the end of the " +
                   std::to_string(file->size()) + "-byte file");

  const json header = parse_header(path, file->data() + kLengthFieldBytes, header_size);
  const uint8_t* data = file->data() + kLengthFieldBytes + header_size;
  const uint64_t data_size = file->size() - kLengthFieldBytes - header_size;

  SafetensorsFile result;
  result.path_ = path;
  std::vector<TensorEntry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      result.metadata_ = parse_metadata(path, value);
      continue;
    }
    entries.push_back(parse_entry(path, name, value, data_size));
  }
  std::vector<ByteRange> ranges;
  for (const TensorEntry& entry : entries) ranges.push_back({entry.name, entry.begin, entry.end});
  check_no_overlap(path, std::move(ranges));

  for (TensorEntry& entry : entries) {
    HostTensor& t = result.tensors_[entry.name];
    t.dtype = entry.dtype;
    t.shape = std::move(entry.shape);
    t.data = data + entry.begin;
    t.owner = file;  // the mapping lives as long as any tensor viewing it
    // The format promises no alignment (writers pad the header to 8 bytes by convention;
    // an odd header length or offset shifts the data), so a misaligned tensor is copied
    // once into owned memory: every reader may then cast its pointer to the element type.
    if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0)
      t = HostTensor::copy_of(t.dtype, t.shape, t.data);
  }
  return result;
}

const HostTensor& SafetensorsFile::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "no tensor '" + name + "'");
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  for (const auto& entry : tensors_) names.push_back(entry.first);
  return names;
}

void SafetensorsWriter::add(const std::string& name, const HostTensor& tensor) {
  if (name == kMetadataKey) throw Error("safetensors writer: '__metadata__' cannot name a tensor");
  if (!tensor.data && tensor.nbytes() > 0)
    throw Error("safetensors writer: tensor '" + name + "' has no data");
  tensors_[name] = tensor;
}

void SafetensorsWriter::write(const std::string& path) const {
  // Tensors lie contiguously in name order (std::map order), as the reference writes them.
  json header = json::object();
  if (!metadata_.empty()) header[kMetadataKey] = metadata_;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    header[name] = {{"dtype", dtype_name(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", json::array({offset, offset + t.nbytes()})}};
    offset += t.nbytes();
  }
  // Padding the header with spaces to a multiple of 8 keeps the data section 8-byte aligned.
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  uint8_t length_field[kLengthFieldBytes];
  write_le64(header_text.size(), length_field);

  AtomicFile out(path);
  out.write(length_field, sizeof(length_field));
  out.write(header_text.data(), header_text.size());
  for (const auto& entry : tensors_) {
    throw_if_interrupted("writing a safetensors file");  // the temporary goes with the unwinding
    out.write(entry.second.data, entry.second.nbytes());
  }
  out.commit();
}

}  // namespace gemlite
