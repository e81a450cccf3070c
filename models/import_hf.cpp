#include "models/import_hf.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/io/json_file.h"
#include "runtime/io/readable_file.h"
#include "runtime/io/safetensors.h"

namespace gemlite {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void add_all_tensors(const SafetensorsFile& file, SourceModel* model) {
  for (const std::string& name : file.names()) model->tensors[name] = file.get(name);
}

// The index's weight_map sends each tensor name to a shard file in the same directory.
void add_sharded_tensors(const std::string& dir, const std::string& index_path, SourceModel* model) {
  const json index = read_json_file(index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail(index_path, "missing 'weight_map' object");

  std::map<std::string, SafetensorsFile> shards;  // opened once each, by file name
  for (const auto& [tensor_name, shard_name] : index["weight_map"].items()) {
    if (!shard_name.is_string() || shard_name.get<std::string>().find('/') != std::string::npos)
      fail(index_path, "tensor '" + tensor_name + "' maps to " + shard_name.dump() +
                           ", not a file name in the same directory");
    const std::string shard = shard_name.get<std::string>();
    const std::string shard_path = (fs::path(dir) / shard).string();
    if (!shards.count(shard)) {
      if (!path_exists(shard_path))
        fail(index_path, "shard '" + shard + "' (holding '" + tensor_name + "') does not exist");
      shards.emplace(shard, SafetensorsFile::open(shard_path));
    }
    model->tensors[tensor_name] = shards.at(shard).get(tensor_name);
  }
}

// tokenizer.json's "added_tokens": [{"id": 32010, "content": "<|user|>", "rstrip": true, ...}, ...]
// into model->added_tokens and model->rstrip_token_ids.
void read_added_tokens(const std::string& dir, SourceModel* model) {
  const std::string path = (fs::path(dir) / "tokenizer.json").string();
  if (!path_exists(path)) return;
  const json tokenizer = read_json_file(path);
  std::vector<std::pair<int, std::string>>& added = model->added_tokens;
  if (!tokenizer.is_object() || !tokenizer.contains("added_tokens")) return;
  const json& list = tokenizer["added_tokens"];
  if (!list.is_array()) fail(path, "\"added_tokens\" is not a list");
  for (const json& token : list) {
    if (!token.is_object() || !token.contains("id") || !token["id"].is_number_integer() ||
        !token.contains("content") || !token["content"].is_string())
      fail(path, "an entry of \"added_tokens\" lacks an integer \"id\" or a string \"content\"");
    const int64_t id = token["id"].get<int64_t>();
    if (id < 0 || id >= (int64_t(1) << 30)) fail(path, "added token id " + std::to_string(id) + " out of range");
    added.emplace_back(int(id), token["content"].get<std::string>());
    const json rstrip = token.value("rstrip", json(false));
    if (!rstrip.is_boolean()) fail(path, "added token " + std::to_string(id) + ": \"rstrip\" is not true or false");
    if (rstrip.get<bool>()) model->rstrip_token_ids.push_back(int(id));
  }
}

}  // namespace

SourceModel load_hf_directory(const std::string& dir) {
  if (!is_directory_path(dir)) fail(dir, "not a directory (expected a Hugging Face checkpoint)");
  SourceModel model;
  const std::string config_path = (fs::path(dir) / "config.json").string();
  model.config = parse_hf_config(read_json_file(config_path), config_path);

  const std::string single_path = (fs::path(dir) / "model.safetensors").string();
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  if (path_exists(index_path))
    add_sharded_tensors(dir, index_path, &model);
  else if (path_exists(single_path))
    add_all_tensors(SafetensorsFile::open(single_path), &model);
  else
    fail(dir, "has neither model.safetensors nor model.safetensors.index.json");
  if (model.config.architecture == "phi3") split_fused_projections(model, dir);
  check_source_tensors(model, dir);

  const std::string tokenizer_path = (fs::path(dir) / "tokenizer.model").string();
  if (path_exists(tokenizer_path)) {
    model.tokenizer_path = tokenizer_path;
    read_added_tokens(dir, &model);  // only used beside a tokenizer.model
  }
  return model;
}

}  // namespace gemlite
