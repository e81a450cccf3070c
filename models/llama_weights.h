#pragma once
// The Hugging Face names of a llama-family model's tensors: the quantizer, the packed
// checkpoint and the importers all speak them.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/model_config.h"

namespace gemlite {

struct LayerTensorNames {
  std::string attn_norm, ffn_norm;                // "<prefix>.input_layernorm.weight", ...
  std::string q, k, v, o, gate, up, down;         // linear modules, without ".weight"
  std::vector<std::string> linears() const { return {q, k, v, o, gate, up, down}; }
};

LayerTensorNames layer_tensor_names(int layer);

inline const char* kEmbeddingName = "model.embed_tokens.weight";
inline const char* kFinalNormName = "model.norm.weight";
inline const char* kLmHeadModule = "lm_head";

// Every linear module of the model in checkpoint order, lm_head last.
std::vector<std::string> linear_module_names(int n_layers);

// [out, in] of linear module `module` (a name of linear_module_names) under config `c`:
// the one place the projections' shapes come from (the packed checkpoint's loader and the
// importers' required tensors both ask here).
std::pair<int64_t, int64_t> linear_shape(const ModelConfig& c, const std::string& module);

// Why a checkpoint's tensor `name` that a model of `n_layers` layers does not read is refused:
// "tensor '<name>' is not used by a <n>-layer model ..." for a layer at or beyond n_layers,
// "tensor '<name>' is not used by this model ..." for anything else.
std::string unused_tensor_error(const std::string& name, int n_layers);

// The source tensor that holds `module`'s weight: "<module>.weight", or the embedding for
// a tied lm_head.
std::string source_weight_name(const std::string& module, bool tied_embeddings);

}  // namespace gemlite
