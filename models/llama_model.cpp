#include "models/llama_model.h"

#include "models/rope.h"
#include "runtime/error.h"

namespace gemlite {

LlamaModel::LlamaModel(const PackedCheckpoint& ckpt, Backend& backend, int context)
    : config_(ckpt.config), backend_(backend), weight_bytes_(ckpt.weight_bytes()) {
  attention_shape_ = {config_.n_heads, config_.n_kv_heads, config_.head_dim};
  rope_inv_freq_ = rope_inv_freq(config_);
  embedding_ = backend.upload(ckpt.embedding);
  final_norm_ = backend.upload(ckpt.final_norm);
  for (const PackedLayer& packed : ckpt.layers) {
    Layer layer;
    layer.attn_norm = backend.upload(packed.attn_norm);
    layer.ffn_norm = backend.upload(packed.ffn_norm);
    layer.q = backend.make_linear(packed.q);
    layer.k = backend.make_linear(packed.k);
    layer.v = backend.make_linear(packed.v);
    layer.o = backend.make_linear(packed.o);
    layer.gate = backend.make_linear(packed.gate);
    layer.up = backend.make_linear(packed.up);
    layer.down = backend.make_linear(packed.down);
    layers_.push_back(std::move(layer));
  }
  lm_head_ = backend.make_linear(ckpt.lm_head);
  if (context <= 0) context = config_.max_seq_len;
  kv_cache_ = backend.make_kv_cache(config_.n_layers, context, config_.n_kv_heads * config_.head_dim);
}

void LlamaModel::forward(const std::vector<int>& ids, int pos0, bool all_logits,
                         std::vector<float>& logits) {
  const int T = int(ids.size());
  if (T == 0) throw Error("forward: no tokens");
  if (pos0 < 0 || pos0 + T > context())
    throw Error("context is full: " + std::to_string(pos0 + T) + " positions needed, " +
                std::to_string(context()) + " available");
  const ModelConfig& c = config_;
  const int q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  Backend& b = backend_;

  Tensor x = b.alloc(T, c.dim);            // [T, dim] residual stream
  Tensor h = b.alloc(T, c.dim);            // [T, dim] normed input of a block
  Tensor q = b.alloc(T, q_dim);            // [T, n_heads*hd]
  Tensor k = b.alloc(T, kv_dim);           // [T, n_kv*hd]
  Tensor v = b.alloc(T, kv_dim);           // [T, n_kv*hd]
  Tensor attn = b.alloc(T, q_dim);         // [T, n_heads*hd]
  Tensor gate = b.alloc(T, c.hidden_dim);  // [T, hidden]
  Tensor up = b.alloc(T, c.hidden_dim);    // [T, hidden]

  b.embed(embedding_, ids, x);
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    b.rmsnorm(x, layer.attn_norm, c.norm_eps, h);
    layer.q->forward(h, q);
    layer.k->forward(h, k);
    layer.v->forward(h, v);
    b.rope(q, k, attention_shape_, pos0, rope_inv_freq_);
    b.attention(*kv_cache_, int(l), pos0, q, k, v, attention_shape_, attn);
    layer.o->forward(attn, h);
    b.add(x, h);

    b.rmsnorm(x, layer.ffn_norm, c.norm_eps, h);
    layer.gate->forward(h, gate);
    layer.up->forward(h, up);
    b.silu_mul(gate, up);
    layer.down->forward(gate, h);
    b.add(x, h);
  }

  // Only the rows whose logits are wanted go through the classifier.
  const Tensor last = all_logits ? x : x.slice_rows(T - 1, 1);
  Tensor normed = b.alloc(last.rows, c.dim);
  b.rmsnorm(last, final_norm_, c.norm_eps, normed);
  Tensor out = b.alloc(last.rows, c.vocab_size);  // [rows, vocab]
  lm_head_->forward(normed, out);
  logits.resize(size_t(out.numel()));
  b.copy_to_host(out, logits.data());
}

}  // namespace gemlite
