#include "models/packed_checkpoint.h"

#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "models/llama_weights.h"
#include "runtime/error.h"
#include "runtime/io/json_file.h"
#include "runtime/io/output_file.h"
#include "runtime/io/readable_file.h"
#include "runtime/io/safetensors.h"

namespace gemlite {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* kTiedModule = "tied";

}  // namespace

PackedWeight tied_lm_head(const HostTensor& matrix) {
  PackedWeight w;
  w.format.kind = FormatKind::Dense;
  w.format.dense_dtype = matrix.dtype;
  w.rows = matrix.shape[0];
  w.cols = matrix.shape[1];
  w.parts["weight"] = matrix;
  return w;
}

namespace {

void expect_tensor(const HostTensor& t, const std::string& where, const std::string& name,
                   std::vector<int64_t> shape) {
  if (t.shape != shape)
    fail(where, "tensor '" + name + "' has shape " + t.shape_string() + ", expected " + shape_string(shape));
}

// "out/" and "out" name the same directory.
fs::path normalized_directory(const std::string& dir) {
  fs::path path = fs::path(dir).lexically_normal();
  return path.filename().empty() ? path.parent_path() : path;
}

// A new empty directory "<parent>/<stem>-XXXXXX" of this process's own (never one that
// already held something: a user's "<dir>.tmp" is not ours to delete), with a plain
// directory's permissions (mkdtemp makes it 0700).
fs::path make_unique_directory(const fs::path& parent, const std::string& stem) {
  std::string name = (parent / (stem + "-XXXXXX")).string();
  if (!mkdtemp(name.data())) {
    const int err = errno;
    fail(name, std::string("cannot create directory: ") + std::strerror(err));
  }
  std::error_code ec;
  fs::permissions(name, fs::perms(plain_mode(0777)), ec);
  if (ec) fail(name, "cannot set permissions: " + ec.message());
  return name;
}

// A tensor the config does not account for means config.json describes another model
// (num_hidden_layers 4 beside five layers' tensors, or lm_head "tied" beside lm_head's own
// tensors): the model ran without them, silently.
void check_all_tensors_used(const std::vector<std::string>& names, const std::set<std::string>& used,
                            const PackedCheckpoint& ckpt, const std::string& tensors_path) {
  const std::string head_prefix = std::string(kLmHeadModule) + ".";
  for (const std::string& name : names) {
    if (used.count(name)) continue;
    if (ckpt.lm_head_tied && name.compare(0, head_prefix.size(), head_prefix) == 0)
      fail(tensors_path, "tensor '" + name + "' is not used: config.json marks lm_head \"tied\" to the embedding");
    fail(tensors_path, unused_tensor_error(name, ckpt.config.n_layers));
  }
}

}  // namespace

bool is_packed_checkpoint(const std::string& dir) {
  try {
    const json config = read_json_file((fs::path(dir) / "config.json").string());
    return config.value("quantization_config", json::object()).value("quant_method", "") == "gemlite";
  } catch (const std::exception&) {
    return false;
  }
}

void check_can_save_packed_checkpoint(const std::string& dir) {
  // Replacing an earlier gemlite checkpoint is expected; replacing anything else (a source
  // model, a typo) would destroy data.
  const fs::path path = normalized_directory(dir);
  if (path.empty() || path == "." || path == ".." || path == path.root_path())
    fail("output directory '" + dir + "'", "not a name a checkpoint can be written under");
  std::error_code ec;
  const bool empty_directory = is_directory_path(path.string()) && fs::is_empty(path, ec) && !ec;
  if (path_exists(path.string()) && !empty_directory && !is_packed_checkpoint(path.string()))
    fail(dir, "exists and is not a gemlite packed checkpoint; refusing to replace it");
  // Missing folders on the way are made (mkdir -p), under the nearest one that exists, which
  // must be a directory this process can write: found before a conversion of minutes, not
  // after it.
  fs::path ancestor = path.parent_path();
  while (!ancestor.empty() && !fs::exists(ancestor, ec)) ancestor = ancestor.parent_path();
  if (ancestor.empty()) ancestor = ".";
  if (!fs::is_directory(ancestor, ec))
    fail(ancestor.string(), "not a directory (the output directory '" + dir + "' would go under it)");
  if (::faccessat(AT_FDCWD, ancestor.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    const int err = errno;
    fail(ancestor.string(), "cannot write the output directory '" + dir + "' there: " + std::strerror(err));
  }
}

DType embedding_dtype_for(const WeightFormat& format) {
  if (format.kind == FormatKind::Dense && format.dense_dtype != DType::F16) return format.dense_dtype;
  return DType::F16;
}

std::vector<std::pair<std::string, const PackedWeight*>> PackedCheckpoint::linears() const {
  std::vector<std::pair<std::string, const PackedWeight*>> out;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::vector<std::string> names = layer_tensor_names(int(i)).linears();
    const std::vector<const PackedWeight*> slots = layers[i].linear_slots();
    for (size_t j = 0; j < slots.size(); ++j) out.emplace_back(names[j], slots[j]);
  }
  out.emplace_back(kLmHeadModule, &lm_head);
  return out;
}

size_t PackedCheckpoint::weight_bytes() const {
  size_t bytes = final_norm.nbytes() + size_t(config.dim) * dtype_size(embedding.dtype);
  for (const auto& layer : layers) bytes += layer.attn_norm.nbytes() + layer.ffn_norm.nbytes();
  for (const auto& [name, weight] : linears()) bytes += weight->nbytes();
  return bytes;
}

std::string PackedCheckpoint::format_summary() const {
  std::vector<std::pair<std::string, size_t>> bytes_per_format;  // in order of first use
  for (const PackedLayer& layer : layers)
    for (const PackedWeight* w : layer.linear_slots()) {
      const std::string name = w->format.name();
      auto it = std::find_if(bytes_per_format.begin(), bytes_per_format.end(),
                             [&](const auto& entry) { return entry.first == name; });
      if (it == bytes_per_format.end()) it = bytes_per_format.insert(bytes_per_format.end(), {name, 0});
      it->second += w->nbytes();
    }
  std::stable_sort(bytes_per_format.begin(), bytes_per_format.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string summary;
  for (const auto& [name, bytes] : bytes_per_format) summary += (summary.empty() ? "" : "+") + name;
  return summary.empty() ? default_format : summary;
}

PackedCheckpoint load_packed_checkpoint(const std::string& dir) {
  if (!is_directory_path(dir)) fail(dir, "not a directory (expected a gemlite packed checkpoint)");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!path_exists(config_path)) fail(config_path, "missing (is this a gemlite packed checkpoint?)");
  const json config_json = read_json_file(config_path);

  PackedCheckpoint ckpt;
  ckpt.config = parse_hf_config(config_json, config_path);
  // A key of the wrong JSON type ("format_version": "2") is a clear error naming the file and
  // the key.
  const json quant = json_value_or(config_json, "quantization_config", json::object(), config_path,
                                   "quantization_config", "an object");
  if (!quant.is_object()) fail(config_path, "quantization_config is " + quant.dump() + ", not an object");
  const auto quant_value = [&](const char* key, auto fallback, const char* what) {
    return json_value_or(quant, key, fallback, config_path, std::string("quantization_config.") + key, what);
  };
  if (quant_value("quant_method", std::string(), "a string") != "gemlite")
    fail(config_path, "not a gemlite packed checkpoint (quantization_config.quant_method is not "
                      "\"gemlite\"); convert it with gemlite-quantize");
  // Version 2 changed only the fp6/fp5 layout, so a version-1 checkpoint of other formats
  // reads as it is; its fp6/fp5 modules are refused below.
  const int version = quant_value("format_version", 0, "an integer");
  if (version != kPackedFormatVersion && version != 1)
    fail(config_path, "packed format version " + std::to_string(version) +
                          " is not supported (this build reads versions 1 and " +
                          std::to_string(kPackedFormatVersion) + "); re-quantize it with gemlite-quantize");
  const json modules = quant_value("modules", json::object(), "an object");
  if (!modules.is_object()) fail(config_path, "quantization_config.modules is " + modules.dump() + ", not an object");
  ckpt.default_format = quant_value("format", std::string(), "a string");
  ckpt.chat_template = json_value_or(config_json, "gemlite_chat_template", std::string(), config_path,
                                     "gemlite_chat_template", "a string");
  ckpt.rstrip_token_ids = json_value_or(config_json, "gemlite_rstrip_token_ids", std::vector<int>(), config_path,
                                        "gemlite_rstrip_token_ids", "a list of token ids");

  const std::string tensors_path = (fs::path(dir) / "model.safetensors").string();
  const auto file = SafetensorsFile::open(tensors_path);
  std::set<std::string> used;  // every tensor the model reads; any other is refused below
  // The embedding is F32, F16 or BF16 (embedding_dtype_for), the norms F32: anything else
  // is refused here rather than met by a backend mid-run.
  auto tensor = [&](const std::string& name, std::vector<int64_t> shape, std::vector<DType> dtypes) {
    const HostTensor& t = file.get(name);
    used.insert(name);
    expect_tensor(t, tensors_path, name, shape);
    if (std::find(dtypes.begin(), dtypes.end(), t.dtype) == dtypes.end())
      fail(tensors_path, "tensor '" + name + "' is " + dtype_name(t.dtype) + " (expected " +
                             (dtypes.size() == 1 ? "F32" : "F32, F16 or BF16") + ")");
    return t;
  };

  const ModelConfig& c = ckpt.config;
  ckpt.embedding = tensor(kEmbeddingName, {c.vocab_size, c.dim}, {DType::F32, DType::F16, DType::BF16});
  ckpt.final_norm = tensor(kFinalNormName, {c.dim}, {DType::F32});
  check_finite(ckpt.final_norm, tensors_path, kFinalNormName);
  auto linear = [&](const std::string& module) {
    if (!modules.contains(module) || !modules[module].is_string())
      fail(config_path, "quantization_config.modules has no format for '" + module + "'");
    const std::string format_name = modules[module].get<std::string>();
    if (format_name == kTiedModule) {
      // Only the classifier shares the embedding's [vocab, dim]; another module marked
      // "tied" would be run with that shape (a CPU run wrote past its output).
      if (module != kLmHeadModule) fail(config_path, "module '" + module + "' is \"tied\"; only lm_head can be");
      return tied_lm_head(ckpt.embedding);
    }
    PackedWeight w;
    try {
      w.format = WeightFormat::parse(format_name);
    } catch (const Error& e) {
      fail(config_path, std::string("module '") + module + "': " + e.what());
    }
    if (version == 1 && w.format.kind == FormatKind::FPX)
      fail(config_path, "module '" + module + "' is " + format_name +
                            " in packed format version 1, whose fp6/fp5 layout this build no longer reads; "
                            "re-quantize it with gemlite-quantize");
    std::tie(w.rows, w.cols) = linear_shape(c, module);
    const std::string prefix = module + ".";
    for (const std::string& name : file.names())
      if (name.compare(0, prefix.size(), prefix) == 0) {
        w.parts[name.substr(prefix.size())] = file.get(name);
        used.insert(name);
      }
    validate_packed_weight(w, tensors_path + ": " + module);
    const bool wants_bias = c.qkv_bias && (module.find("q_proj") != std::string::npos ||
                                           module.find("k_proj") != std::string::npos ||
                                           module.find("v_proj") != std::string::npos);
    if (wants_bias && !w.parts.count("bias"))
      fail(tensors_path, "tensor '" + module + ".bias' is missing (the config has q/k/v biases)");
    return w;
  };

  for (int i = 0; i < c.n_layers; ++i) {
    const LayerTensorNames names = layer_tensor_names(i);
    PackedLayer layer;
    layer.attn_norm = tensor(names.attn_norm, {c.dim}, {DType::F32});
    layer.ffn_norm = tensor(names.ffn_norm, {c.dim}, {DType::F32});
    check_finite(layer.attn_norm, tensors_path, names.attn_norm);
    check_finite(layer.ffn_norm, tensors_path, names.ffn_norm);
    const std::vector<std::string> modules_of_layer = names.linears();
    const std::vector<PackedWeight*> slots = layer.linear_slots();
    for (size_t j = 0; j < slots.size(); ++j) *slots[j] = linear(modules_of_layer[j]);
    ckpt.layers.push_back(std::move(layer));
  }
  ckpt.lm_head = linear(kLmHeadModule);
  ckpt.lm_head_tied = json_value_or(modules, kLmHeadModule, std::string(), config_path,
                                    std::string("quantization_config.modules.") + kLmHeadModule, "a string") ==
                      kTiedModule;
  check_all_tensors_used(file.names(), used, ckpt, tensors_path);

  const fs::path tokenizer = fs::path(dir) / "tokenizer.model";
  if (path_exists(tokenizer.string())) ckpt.tokenizer_path = tokenizer.string();
  return ckpt;
}

void save_packed_checkpoint(const PackedCheckpoint& ckpt, const std::string& dir) {
  SafetensorsWriter writer;
  writer.set_metadata("format", "gemlite");
  writer.set_metadata("format_version", std::to_string(kPackedFormatVersion));
  writer.add(kEmbeddingName, ckpt.embedding);
  writer.add(kFinalNormName, ckpt.final_norm);
  for (size_t i = 0; i < ckpt.layers.size(); ++i) {
    const LayerTensorNames names = layer_tensor_names(int(i));
    writer.add(names.attn_norm, ckpt.layers[i].attn_norm);
    writer.add(names.ffn_norm, ckpt.layers[i].ffn_norm);
  }
  json modules = json::object();
  for (const auto& [module, weight] : ckpt.linears()) {
    if (module == kLmHeadModule && ckpt.lm_head_tied) {
      modules[module] = kTiedModule;
      continue;
    }
    modules[module] = weight->format.name();
    for (const auto& [part, tensor] : weight->parts) writer.add(module + "." + part, tensor);
  }

  json config = to_hf_config(ckpt.config);
  config["quantization_config"] = {{"quant_method", "gemlite"},
                                   {"format_version", kPackedFormatVersion},
                                   {"format", ckpt.default_format},
                                   {"embedding", dtype_name(ckpt.embedding.dtype)},
                                   {"modules", modules}};
  if (!ckpt.chat_template.empty()) config["gemlite_chat_template"] = ckpt.chat_template;
  if (!ckpt.rstrip_token_ids.empty()) config["gemlite_rstrip_token_ids"] = ckpt.rstrip_token_ids;

  check_can_save_packed_checkpoint(dir);
  const fs::path final_dir = normalized_directory(dir);
  const fs::path parent = final_dir.has_parent_path() ? final_dir.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail(parent.string(), "cannot create directory: " + ec.message());
  const fs::path temp_dir = make_unique_directory(parent, final_dir.filename().string() + ".tmp");
  try {
    writer.write((temp_dir / "model.safetensors").string());
    const std::string config_path = (temp_dir / "config.json").string();
    std::ofstream out(config_path);
    out << config.dump(2) << "\n";
    if (!out.flush()) fail(config_path, "write failed");
    out.close();
    if (!ckpt.tokenizer_path.empty()) {
      fs::copy_file(ckpt.tokenizer_path, temp_dir / "tokenizer.model", ec);
      if (ec) fail(ckpt.tokenizer_path, "cannot copy tokenizer: " + ec.message());
    }
    // An earlier checkpoint is moved aside (rename replaces the empty directory made for
    // it), the new one moved in, and only then is the old one deleted: whatever fails,
    // one whole checkpoint stays at `dir`.
    fs::path old_dir;
    if (path_exists(final_dir.string())) {
      old_dir = make_unique_directory(parent, final_dir.filename().string() + ".old");
      fs::rename(final_dir, old_dir, ec);
      if (ec) {
        fs::remove(old_dir);
        fail(dir, "cannot move the earlier checkpoint aside: " + ec.message());
      }
    }
    fs::rename(temp_dir, final_dir, ec);
    if (ec) {
      if (!old_dir.empty()) fs::rename(old_dir, final_dir);
      fail(dir, "cannot move the finished checkpoint into place: " + ec.message());
    }
    if (!old_dir.empty()) fs::remove_all(old_dir, ec);  // a leftover here loses nothing
  } catch (...) {
    fs::remove_all(temp_dir, ec);
    throw;
  }
}

}  // namespace gemlite
