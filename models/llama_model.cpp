#include "models/llama_model.h"

#include <algorithm>
#include <optional>

#include "models/rope.h"
#include "runtime/error.h"

namespace gemlite {

LlamaModel::LlamaModel(const PackedCheckpoint& ckpt, Backend& backend, int context, int max_chunk)
    : config_(ckpt.config), backend_(backend), weight_bytes_(ckpt.weight_bytes()) {
  const ModelConfig& c = config_;
  attention_shape_ = {c.n_heads, c.n_kv_heads, c.head_dim};
  const std::vector<float> inv_freq = rope_inv_freq(c);
  rope_inv_freq_ = backend.upload(HostTensor::copy_of(DType::F32, {int64_t(inv_freq.size())}, inv_freq.data()));
  embedding_ = backend.upload(ckpt.embedding);
  final_norm_ = backend.upload(ckpt.final_norm);
  if (context <= 0) context = c.max_seq_len;
  if (max_chunk < 1) throw Error("max_chunk must be >= 1");
  max_chunk_ = std::min({max_chunk, context, backend.max_step_tokens()});
  const int rows = max_chunk_;
  for (const PackedLayer& packed : ckpt.layers) {
    Layer layer;
    layer.attn_norm = backend.upload(packed.attn_norm);
    layer.ffn_norm = backend.upload(packed.ffn_norm);
    layer.qkv = std::make_unique<FusedLinear>(std::vector<const PackedWeight*>{&packed.q, &packed.k, &packed.v},
                                              backend, rows);
    layer.o = backend.make_linear(packed.o);
    layer.gate_up = std::make_unique<FusedLinear>(std::vector<const PackedWeight*>{&packed.gate, &packed.up},
                                                  backend, rows, StackedUse::SwiGLU);
    layer.down = backend.make_linear(packed.down);
    layers_.push_back(std::move(layer));
  }
  lm_head_ = backend.make_linear(ckpt.lm_head);
  kv_cache_ = backend.make_kv_cache(c.n_layers, context, attention_shape_);
  workspace_.x = backend.alloc(rows, c.dim);
  workspace_.h = backend.alloc(rows, c.dim);
  workspace_.qkv = backend.alloc(rows, c.q_dim() + 2 * c.kv_dim());
  workspace_.attn = backend.alloc(rows, c.q_dim());
  workspace_.gate_up = backend.alloc(rows, 2 * c.hidden_dim);
  workspace_.ffn = backend.alloc(rows, c.hidden_dim);
  workspace_.logits = backend.alloc(rows, c.vocab_size);
}

void LlamaModel::forward(const std::vector<int>& ids, int pos0, bool all_logits, std::vector<float>& logits) {
  if (!all_logits) {
    const Tensor last = forward_last(ids, pos0);
    logits.resize(size_t(last.numel()));
    backend_.copy_to_host(last, logits.data());
    return;
  }
  const size_t vocab = size_t(config_.vocab_size);
  logits.resize(ids.size() * vocab);
  for (size_t start = 0; start < ids.size() || start == 0; start += size_t(max_chunk_)) {
    const size_t end = std::min(ids.size(), start + size_t(max_chunk_));
    run_chunk(std::vector<int>(ids.begin() + start, ids.begin() + end), pos0 + int(start), /*all_rows=*/true);
    backend_.copy_to_host(workspace_.logits.slice_rows(0, int64_t(end - start)), &logits[start * vocab]);
  }
}

Tensor LlamaModel::forward_last(const std::vector<int>& ids, int pos0) {
  for (size_t start = 0; start < ids.size() || start == 0; start += size_t(max_chunk_)) {
    const size_t end = std::min(ids.size(), start + size_t(max_chunk_));
    run_chunk(std::vector<int>(ids.begin() + start, ids.begin() + end), pos0 + int(start), /*all_rows=*/false);
  }
  return workspace_.logits.slice_rows(0, 1);
}

void LlamaModel::run_chunk(const std::vector<int>& ids, int pos0, bool all_rows) {
  const int T = int(ids.size());
  if (T == 0) throw Error("forward: no tokens");
  if (pos0 < 0 || pos0 + T > context())
    throw Error("context is full: " + std::to_string(pos0 + T) + " positions needed, " +
                std::to_string(context()) + " available");
  for (int id : ids)
    if (id < 0 || id >= config_.vocab_size)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                  std::to_string(config_.vocab_size));
  backend_.set_step(ids, pos0);
  if (T == 1)  // decode: the same ops on the same buffers every token, so record them once
    backend_.run_captured(decode_step_, [this] { run_ops(1, false); });
  else
    run_ops(T, all_rows);
}

void LlamaModel::run_ops(int T, bool all_rows) {
  const ModelConfig& c = config_;
  Backend& b = backend_;
  Tensor x = workspace_.x.slice_rows(0, T);        // [T, dim]
  Tensor h = workspace_.h.slice_rows(0, T);        // [T, dim]
  Tensor qkv = workspace_.qkv.slice_rows(0, T);          // [T, (n_heads + 2 n_kv) hd]
  Tensor attn = workspace_.attn.slice_rows(0, T);        // [T, n_heads*hd]
  Tensor gate_up = workspace_.gate_up.slice_rows(0, T);  // [T, 2 hidden]
  Tensor ffn = workspace_.ffn.slice_rows(0, T);          // [T, hidden]

  // h holds each block's input (normed), then its output, which add_rmsnorm adds to the
  // residual stream x while norming x for the next block: one pass instead of two. Where
  // the projections on both sides of a norm can (QuantLinear::fuses_rmsnorm: the CUDA qN
  // GEMV at decode), the projection ending a block does that add and half the norm, and
  // the next one finishes it (`pending`): no separate norm at all.
  std::optional<PendingNorm> pending;  // set: h = x ∘ norm weight, its rsqrt(mean square + eps) still to apply
  const auto end_block = [&](const QuantLinear& projection, const Tensor& in, const Tensor& norm_weight,
                             bool next_fuses) {
    if (next_fuses && projection.fuses_rmsnorm(T)) {
      pending = projection.forward_residual(in, x, norm_weight, c.norm_eps, h);
      return;
    }
    pending.reset();
    projection.forward(in, h);
    b.add_rmsnorm(x, h, norm_weight, c.norm_eps, h);
  };
  b.embed(embedding_, x);
  b.rmsnorm(x, layers_[0].attn_norm, c.norm_eps, h);
  const int64_t logit_rows = all_rows ? T : 1;  // the classifier's rows: the last h row or all
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    layer.qkv->forward(h, qkv, pending ? &*pending : nullptr);
    b.attention(*kv_cache_, int(l), qkv, rope_inv_freq_, attention_shape_, attn);
    end_block(*layer.o, attn, layer.ffn_norm, layer.gate_up->fuses_rmsnorm(T));

    layer.gate_up->forward_swiglu(h, gate_up, ffn, pending ? &*pending : nullptr);
    const bool last = l + 1 == layers_.size();
    end_block(*layer.down, ffn, last ? final_norm_ : layers_[l + 1].attn_norm,
              last ? lm_head_->fuses_rmsnorm(logit_rows) : layers_[l + 1].qkv->fuses_rmsnorm(T));
  }

  // h is now the final-normed residual stream (or, with `pending`, residual ∘ final norm
  // weight, the classifier finishing the norm); only the rows whose logits are wanted go
  // through the classifier.
  const Tensor last_h = all_rows ? h : h.slice_rows(T - 1, 1);  // [logit_rows, dim]
  Tensor logits = workspace_.logits.slice_rows(0, last_h.rows);  // [logit_rows, vocab]
  if (pending) {
    const PendingNorm rows{all_rows ? pending->sum_squares : pending->sum_squares.slice_rows(T - 1, 1), pending->eps};
    lm_head_->forward_normed(last_h, rows, logits);
  } else {
    lm_head_->forward(last_h, logits);
  }
}

}  // namespace gemlite
