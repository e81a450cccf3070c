#pragma once
// The shape and hyper-parameters of a llama-family model (Llama 1-3, Mistral, Qwen2, Phi-3), read
// from and written to a Hugging Face config.json. Every importer produces one and every
// later stage trusts it, so validate() runs before a config leaves a parser.
#include <nlohmann/json.hpp>
#include <string>

namespace gemlite {

struct ModelConfig {
  std::string architecture = "llama";  // "llama", "mistral", "qwen2" or "phi3"
  int dim = 0;                         // hidden_size
  int hidden_dim = 0;                  // intermediate_size (the MLP's inner width)
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;                  // < n_heads for grouped-query attention
  int head_dim = 0;                    // usually dim / n_heads, but models may override it
  int vocab_size = 0;
  int max_seq_len = 0;                 // max_position_embeddings
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;              // rms_norm_eps

  struct RopeScaling {
    std::string type = "none";         // or "llama3"
    float factor = 1.0f, low_freq_factor = 1.0f, high_freq_factor = 4.0f;
    int original_max_position = 8192;
  } rope_scaling;

  bool tied_embeddings = false;        // lm_head shares the embedding matrix
  bool qkv_bias = false;               // q/k/v projections carry a bias (Qwen2)
  int bos_id = 1;
  int eos_id = 2;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }

  // Throws Error("<where>: <problem>") naming the offending config.json key.
  void validate(const std::string& where) const;
};

// Accepts transformers 4 keys (rope_theta, rope_scaling, torch_dtype) and transformers 5
// keys (rope_parameters, dtype). Throws Error("<where>: <problem>") naming the key.
ModelConfig parse_hf_config(const nlohmann::json& config, const std::string& where);

// transformers 4 style (rope_theta, rope_scaling), which transformers 5 still reads.
nlohmann::json to_hf_config(const ModelConfig& config);

}  // namespace gemlite
