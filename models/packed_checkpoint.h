#pragma once
// The packed checkpoint: a directory a Hugging Face user recognises.
//   config.json        the model's HF config plus
//                      "quantization_config": {"quant_method": "gemlite", "format_version": 2,
//                        "format": "<default>", "embedding": "f16",
//                        "modules": {"<module>": "<format>" | "tied", ...}}
//                      and "gemlite_chat_template": "<name>" when known,
//                      "gemlite_rstrip_token_ids": [ids] when the tokenizer has such markers.
//   model.safetensors  every linear module's parts as "<module>.<part>" (see
//                      kernels/packed_weight.h), the embedding and the norm weights (F32).
//   tokenizer.model    the sentencepiece model.
// Saving writes a new "<dir>.tmp-XXXXXX" and renames it into place (an earlier checkpoint
// at <dir> is moved aside first and deleted last), so a failed run leaves nothing
// half-written and never touches files it did not create.
#include <memory>
#include <string>
#include <vector>

#include "kernels/packed_weight.h"
#include "models/model_config.h"

namespace gemlite {

// 2: fp6/fp5 weights pre-packed for the GPU kernel (kernels/fpx/fpx_format.h). Version 1
// checkpoints load unless they hold fp6/fp5 modules (those must be re-quantized).
constexpr int kPackedFormatVersion = 2;

struct PackedLayer {
  HostTensor attn_norm, ffn_norm;         // [dim] F32
  PackedWeight q, k, v;                   // [n_heads*hd, dim], [n_kv*hd, dim], [n_kv*hd, dim]
  PackedWeight o;                         // [dim, n_heads*hd]
  PackedWeight gate, up;                  // [hidden, dim]
  PackedWeight down;                      // [dim, hidden]

  // The seven projections in LayerTensorNames::linears() order (q k v o gate up down).
  std::vector<PackedWeight*> linear_slots() { return {&q, &k, &v, &o, &gate, &up, &down}; }
  std::vector<const PackedWeight*> linear_slots() const { return {&q, &k, &v, &o, &gate, &up, &down}; }
};

struct PackedCheckpoint {
  ModelConfig config;
  std::string default_format;             // what the user asked gemlite-quantize for
  std::string chat_template;              // template name, "" when unknown
  HostTensor embedding;                   // [vocab, dim] F32/F16/BF16
  HostTensor final_norm;                  // [dim] F32
  std::vector<PackedLayer> layers;        // [n_layers]
  PackedWeight lm_head;                   // [vocab, dim]; a dense view of `embedding` if tied
  bool lm_head_tied = false;
  std::string tokenizer_path;             // sentencepiece model, "" when none
  // Markers of the tokenizer after which encoding drops whitespace (Tokenizer::set_rstrip),
  // config.json's "gemlite_rstrip_token_ids".
  std::vector<int> rstrip_token_ids;

  // Every linear module with its Hugging Face name, lm_head last.
  std::vector<std::pair<std::string, const PackedWeight*>> linears() const;
  size_t weight_bytes() const;  // everything a forward pass reads once per token
  // The formats of the layers' projections, most bytes first, joined by '+': "q4g64", or
  // "q4g32+q6g32" for a GGUF Q4_K_M kept in its types (lm_head not counted: llama-bench's
  // label names the file's type the same way).
  std::string format_summary() const;
};

// Throws Error("<dir>/<file>: <problem>") for anything missing, inconsistent or corrupt.
PackedCheckpoint load_packed_checkpoint(const std::string& dir);
void save_packed_checkpoint(const PackedCheckpoint& checkpoint, const std::string& dir);
// Throws Error when `dir` exists and is something other than a gemlite packed checkpoint
// (save would refuse it): lets a program fail before hours of work, not after.
void check_can_save_packed_checkpoint(const std::string& dir);

// Whether `dir`'s config.json says quant_method "gemlite" (false for anything unreadable).
bool is_packed_checkpoint(const std::string& dir);

// The classifier of a tied model: a dense view of the embedding [vocab, dim], no copy.
PackedWeight tied_lm_head(const HostTensor& embedding);

// The embedding's dense type for a default format: f32 and bf16 keep theirs, all others f16.
DType embedding_dtype_for(const WeightFormat& format);

}  // namespace gemlite
