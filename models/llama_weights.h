#pragma once
// The Hugging Face names of a llama-family model's tensors: the quantizer, the packed
// checkpoint and the importers all speak them.
#include <string>
#include <vector>

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

// The source tensor that holds `module`'s weight: "<module>.weight", or the embedding for
// a tied lm_head.
std::string source_weight_name(const std::string& module, bool tied_embeddings);

}  // namespace gemlite
