#pragma once
// The llama-family decoder (Llama 1-3, Mistral, Qwen2, TinyLlama), written once against
// the Backend ops: embedding, RMSNorm, RoPE, grouped-query attention over a KV cache,
// SwiGLU MLP, tied or separate classifier. Every projection is a QuantLinear.
#include <memory>
#include <vector>

#include "models/packed_checkpoint.h"
#include "runtime/backend.h"

namespace gemlite {

class LlamaModel {
 public:
  // Uploads the checkpoint's weights to `backend` and makes a KV cache of `context`
  // positions (0 = the model's max_seq_len).
  LlamaModel(const PackedCheckpoint& checkpoint, Backend& backend, int context = 0);

  // Runs ids [T] at positions [pos0, pos0 + T) and stores their keys and values.
  // logits: [vocab] for the last token, or [T, vocab] when all_logits.
  // Throws Error when pos0 + T exceeds the context.
  void forward(const std::vector<int>& ids, int pos0, bool all_logits, std::vector<float>& logits);

  const ModelConfig& config() const { return config_; }
  int context() const { return kv_cache_->capacity(); }
  Backend& backend() { return backend_; }
  size_t weight_bytes() const { return weight_bytes_; }  // read once per decoded token

 private:
  struct Layer {
    Tensor attn_norm, ffn_norm;                      // [1, dim]
    std::unique_ptr<QuantLinear> q, k, v, o;         // see PackedLayer for shapes
    std::unique_ptr<QuantLinear> gate, up, down;
  };

  ModelConfig config_;
  Backend& backend_;
  AttentionShape attention_shape_;
  std::vector<float> rope_inv_freq_;                 // [head_dim / 2]
  Tensor embedding_;                                 // [vocab, dim]
  Tensor final_norm_;                                // [1, dim]
  std::vector<Layer> layers_;
  std::unique_ptr<QuantLinear> lm_head_;             // [vocab, dim]
  std::unique_ptr<KVCache> kv_cache_;
  size_t weight_bytes_;
};

}  // namespace gemlite
