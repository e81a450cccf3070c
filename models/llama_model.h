#pragma once
// The llama-family decoder (Llama 1-3, Mistral, Qwen2, TinyLlama), written once against
// the Backend ops: embedding, RMSNorm, RoPE, grouped-query attention over a KV cache,
// SwiGLU MLP, tied or separate classifier. Every projection is a QuantLinear.
//
// Activations live in a workspace allocated once, for the largest chunk the model runs:
// a forward allocates nothing. A longer prompt runs as several chunks. A one-token
// forward (decode) is recorded once and replayed (Backend::run_captured: a CUDA graph).
#include <memory>
#include <vector>

#include "models/packed_checkpoint.h"
#include "runtime/backend.h"
#include "runtime/fused_linear.h"

namespace gemlite {

class LlamaModel {
 public:
  // Prompts run in chunks of at most this many tokens (the workspace's rows).
  static constexpr int kDefaultMaxChunk = 512;

  // Uploads the checkpoint's weights to `backend` and makes a KV cache of `context`
  // positions (0 = the model's max_seq_len) and a workspace for chunks of at most
  // `max_chunk` tokens.
  LlamaModel(const PackedCheckpoint& checkpoint, Backend& backend, int context = 0,
             int max_chunk = kDefaultMaxChunk);

  // Runs ids [T] at positions [pos0, pos0 + T) and stores their keys and values.
  // logits: [vocab] for the last token, or [T, vocab] when all_logits.
  // Throws Error when pos0 + T exceeds the context or an id is outside the vocabulary.
  void forward(const std::vector<int>& ids, int pos0, bool all_logits, std::vector<float>& logits);
  // The same, leaving the logits [1, vocab] of the last token on the backend (a view of
  // the workspace, valid until the next forward): nothing crosses to the host.
  Tensor forward_last(const std::vector<int>& ids, int pos0);

  const ModelConfig& config() const { return config_; }
  int context() const { return kv_cache_->capacity(); }
  int max_chunk() const { return max_chunk_; }
  Backend& backend() { return backend_; }
  size_t weight_bytes() const { return weight_bytes_; }  // read once per decoded token

 private:
  struct Layer {
    Tensor attn_norm, ffn_norm;                      // [1, dim]
    std::unique_ptr<FusedLinear> qkv;                // [n_heads*hd + 2 n_kv*hd, dim]: q, k, v stacked
    std::unique_ptr<QuantLinear> o;                  // [dim, n_heads*hd]
    std::unique_ptr<FusedLinear> gate_up;            // [2 hidden, dim]: gate, up stacked
    std::unique_ptr<QuantLinear> down;               // [dim, hidden]
  };
  // Activations for up to max_chunk_ rows; a chunk of T tokens uses the first T rows.
  struct Workspace {
    Tensor x;       // [max_chunk, dim] residual stream
    Tensor h;       // [max_chunk, dim] normed input of a block / block output
    Tensor qkv;     // [max_chunk, (n_heads + 2 n_kv) hd]  q, k, v of each token side by side
    Tensor attn;    // [max_chunk, n_heads*hd]
    Tensor gate_up; // [max_chunk, 2 hidden]
    Tensor ffn;     // [max_chunk, hidden]  silu(gate) * up
    Tensor logits;  // [max_chunk, vocab]
  };

  // Checks ids [T <= max_chunk] and pos0, sets the step and runs it: logits of the last
  // row (or of every row with all_rows) in workspace_.logits.
  void run_chunk(const std::vector<int>& ids, int pos0, bool all_rows);
  // The forward pass itself, T rows of the workspace, on the step already set.
  void run_ops(int T, bool all_rows);

  ModelConfig config_;
  Backend& backend_;
  AttentionShape attention_shape_;
  Tensor rope_inv_freq_;                             // [1, head_dim / 2] F32
  Tensor embedding_;                                 // [vocab, dim]
  Tensor final_norm_;                                // [1, dim]
  std::vector<Layer> layers_;
  std::unique_ptr<QuantLinear> lm_head_;             // [vocab, dim]
  std::unique_ptr<KVCache> kv_cache_;
  int max_chunk_;
  Workspace workspace_;
  std::unique_ptr<CapturedOps> decode_step_;         // the T = 1 forward, once recorded
  size_t weight_bytes_;
};

}  // namespace gemlite
