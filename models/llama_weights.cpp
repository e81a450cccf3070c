#include "models/llama_weights.h"

#include <algorithm>

namespace gemlite {

LayerTensorNames layer_tensor_names(int layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  LayerTensorNames n;
  n.attn_norm = p + "input_layernorm.weight";
  n.ffn_norm = p + "post_attention_layernorm.weight";
  n.q = p + "self_attn.q_proj";
  n.k = p + "self_attn.k_proj";
  n.v = p + "self_attn.v_proj";
  n.o = p + "self_attn.o_proj";
  n.gate = p + "mlp.gate_proj";
  n.up = p + "mlp.up_proj";
  n.down = p + "mlp.down_proj";
  return n;
}

std::vector<std::string> linear_module_names(int n_layers) {
  std::vector<std::string> names;
  for (int i = 0; i < n_layers; ++i)
    for (auto& name : layer_tensor_names(i).linears()) names.push_back(name);
  names.push_back(kLmHeadModule);
  return names;
}

std::pair<int64_t, int64_t> linear_shape(const ModelConfig& c, const std::string& module) {
  const auto ends_with = [&](const std::string& suffix) {
    return module.size() >= suffix.size() && module.compare(module.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with("q_proj")) return {c.q_dim(), c.dim};
  if (ends_with("k_proj") || ends_with("v_proj")) return {c.kv_dim(), c.dim};
  if (ends_with("o_proj")) return {c.dim, c.q_dim()};
  if (ends_with("gate_proj") || ends_with("up_proj")) return {c.hidden_dim, c.dim};
  if (ends_with("down_proj")) return {c.dim, c.hidden_dim};
  return {c.vocab_size, c.dim};  // lm_head
}

std::string source_weight_name(const std::string& module, bool tied_embeddings) {
  return tied_embeddings && module == kLmHeadModule ? kEmbeddingName : module + ".weight";
}

std::string unused_tensor_error(const std::string& name, int n_layers) {
  const std::string layers = "model.layers.";
  if (name.compare(0, layers.size(), layers) == 0) {
    const std::string rest = name.substr(layers.size());
    const size_t digits = rest.find_first_not_of("0123456789");
    if (digits > 0 && digits != std::string::npos && std::stoll(rest.substr(0, std::min<size_t>(digits, 9))) >= n_layers)
      return "tensor '" + name + "' is not used by a " + std::to_string(n_layers) +
             "-layer model: config and tensors disagree";
  }
  return "tensor '" + name + "' is not used by this model: config and tensors disagree";
}

}  // namespace gemlite
