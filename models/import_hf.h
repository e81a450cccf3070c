#pragma once
// Loads a Hugging Face checkpoint directory as save_pretrained writes it: config.json plus
// model.safetensors, or model.safetensors.index.json and its shards.
#include <string>

#include "models/source_model.h"

namespace gemlite {

// Tensors stay views of the mapped safetensors files (no copy, no conversion). The
// tokenizer path is <dir>/tokenizer.model when that file exists. Throws Error naming the
// file at fault: config.json, the index, a shard, or the directory itself.
SourceModel load_hf_directory(const std::string& dir);

}  // namespace gemlite
