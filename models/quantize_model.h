#pragma once
// Source model (HF directory, GGUF or llama2.c .bin: float tensors, or a GGUF's blocks) ->
// packed checkpoint.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "models/packed_checkpoint.h"
#include "models/source_model.h"

namespace gemlite {

struct QuantizeSpec {
  WeightFormat format;  // every linear module unless overridden
  // (pattern, format): a pattern matches a module when it equals a whole dotted part of its
  // name ("lm_head", "mlp.down_proj", "layers.0"); the last matching pattern wins.
  std::vector<std::pair<std::string, WeightFormat>> overrides;
  std::string chat_template;  // recorded in config.json when not empty
};

// "lm_head=q8" -> ("lm_head", q8); throws Error on a malformed override.
std::pair<std::string, WeightFormat> parse_override(const std::string& text);
WeightFormat format_for_module(const QuantizeSpec& spec, const std::string& module);

// Throws Error for an override pattern that matches no linear module of `config`.
void check_overrides_match(const QuantizeSpec& spec, const ModelConfig& config);

// How one linear module was packed.
enum class PackedFrom {
  Floats,       // quantized from the source's values
  SourceCodes,  // a GGUF's own codes, unchanged (models/pack_ggml_codes.h)
  Tied,         // the embedding, stored once for both
};
// Called after each linear module with (modules done, modules in all, module name, how).
using QuantizeProgress = std::function<void(int, int, const std::string&, PackedFrom)>;

PackedCheckpoint quantize_model(const SourceModel& source, const QuantizeSpec& spec,
                                const QuantizeProgress& progress = nullptr);

}  // namespace gemlite
