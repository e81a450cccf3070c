#pragma once
// An unquantized model as an importer hands it to the quantizer: the config and every
// tensor under its Hugging Face name (see models/llama_weights.h):
//   model.embed_tokens.weight                          [vocab, dim]
//   model.layers.{i}.input_layernorm.weight            [dim]
//   model.layers.{i}.self_attn.q_proj.weight           [n_heads*head_dim, dim]
//   model.layers.{i}.self_attn.{k,v}_proj.weight       [n_kv_heads*head_dim, dim]
//   model.layers.{i}.self_attn.{q,k,v}_proj.bias       [rows of the weight]  (qwen2 only)
//   model.layers.{i}.self_attn.o_proj.weight           [dim, n_heads*head_dim]
//   model.layers.{i}.post_attention_layernorm.weight   [dim]
//   model.layers.{i}.mlp.{gate,up}_proj.weight         [hidden_dim, dim]
//   model.layers.{i}.mlp.down_proj.weight              [dim, hidden_dim]
//   model.norm.weight                                  [dim]
//   lm_head.weight                                     [vocab, dim]  (absent when tied)
// Tensors are F32, F16 or BF16, views of a mapped file or owned copies. q and k rows are in
// Hugging Face's rotate-half RoPE order, which is the order the runtime uses.
#include <map>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "runtime/host_tensor.h"
#include "tokenizer/spm_model.h"

namespace gemlite {

// A 2-D tensor in ggml blocks as a GGUF stored them (models/ggml_blocks.h): row r of
// `blocks` [rows, row bytes] U8 holds row r of the tensor, so row moves act on it as on
// any tensor.
struct BlockSource {
  uint32_t type_id = 0;  // ggml type id (ggml_blocks.h)
  HostTensor blocks;

  std::vector<int64_t> shape() const;  // [rows, weights per row]
  HostTensor dequantize() const;       // F32 [rows, cols], owned
};

struct SourceModel {
  ModelConfig config;
  std::map<std::string, HostTensor> tensors;
  // A GGUF's block-quantized tensors, kept as the file's bytes and decoded one at a time
  // when asked for (tensor()): converting a 7B GGUF never holds 27 GB of floats; the
  // quantizer also packs affine blocks as they are (models/pack_ggml_codes.h).
  // A name is in `tensors` or here, not both.
  std::map<std::string, BlockSource> block_sources;

  bool has(const std::string& name) const;
  std::vector<int64_t> shape_of(const std::string& name) const;  // Error when absent
  // The tensor: a view from `tensors`, or a block source decoded to F32. Error when absent.
  HostTensor tensor(const std::string& name) const;
  std::string tokenizer_path;  // sentencepiece model; "" when the source has none
  // Tokens a Hugging Face tokenizer adds beside tokenizer.model ({id, text}, from
  // tokenizer.json's "added_tokens"): the packed checkpoint's tokenizer.model gets those
  // past its own pieces (spm_model_with_added_tokens), so Phi-3's <|user|> is one token.
  std::vector<std::pair<int, std::string>> added_tokens;
  std::vector<int> rstrip_token_ids;  // added tokens marked "rstrip" (Tokenizer::set_rstrip)
  // The vocabulary a source carries without a sentencepiece model (a GGUF's llama-style
  // tokenizer.ggml.*), for spm_bpe_model_proto; empty when it has none usable.
  std::vector<SpmPiece> vocabulary;
  std::string vocabulary_problem;  // why `vocabulary` is empty although the source has one
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Every tensor the config requires, with its shape, in checkpoint order.
std::vector<TensorSpec> required_source_tensors(const ModelConfig& config);

// Throws Error("<where>: tensor '<name>' ...") for a missing tensor, a wrong shape, a
// non-floating-point dtype, or a tensor the config does not use (a layer beyond
// n_layers); RoPE buffers (*.rotary_emb.*) and a tied model's lm_head.weight are ignored.
void check_source_tensors(const SourceModel& model, const std::string& where);

// Reorders the rows of a q or k projection [n_heads*head_dim, in] (or its bias) from
// Meta's interleaved-pair RoPE order (llama2.c, GGUF) to rotate-half order: within each
// head, HF row i < head_dim/2 is Meta row 2i and HF row head_dim/2 + i is Meta row 2i + 1.
HostTensor interleaved_to_rotate_half_rows(const HostTensor& weight, int head_dim);
// The same for every layer's q and k projection weights of `model` (llama2.c and GGUF
// llama sources).
void interleaved_to_rotate_half_qk(SourceModel& model);

// Phi-3 checkpoints hold each layer's q, k, v as one self_attn.qkv_proj.weight
// [q + 2 kv rows, dim] and gate, up as one mlp.gate_up_proj.weight [2 hidden, dim] (gate
// first): replaces them by views of their rows under the names above. Error naming `where`
// for a missing or misshapen fused tensor.
void split_fused_projections(SourceModel& model, const std::string& where);

}  // namespace gemlite
