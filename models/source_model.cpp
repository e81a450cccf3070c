#include "models/source_model.h"

#include <cstring>
#include <set>

#include "models/ggml_blocks.h"
#include "models/llama_weights.h"
#include "runtime/error.h"

namespace gemlite {

std::vector<TensorSpec> required_source_tensors(const ModelConfig& c) {
  const int64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  std::vector<TensorSpec> specs = {{kEmbeddingName, {c.vocab_size, dim}}};
  const auto weight = [&](const std::string& module) {
    const auto [out, in] = linear_shape(c, module);
    specs.push_back({module + ".weight", {out, in}});
  };
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerTensorNames layer = layer_tensor_names(i);
    specs.push_back({layer.attn_norm, {dim}});
    weight(layer.q);
    weight(layer.k);
    weight(layer.v);
    if (c.qkv_bias) {
      specs.push_back({layer.q + ".bias", {q_dim}});
      specs.push_back({layer.k + ".bias", {kv_dim}});
      specs.push_back({layer.v + ".bias", {kv_dim}});
    }
    weight(layer.o);
    specs.push_back({layer.ffn_norm, {dim}});
    weight(layer.gate);
    weight(layer.up);
    weight(layer.down);
  }
  specs.push_back({kFinalNormName, {dim}});
  if (!c.tied_embeddings) weight(kLmHeadModule);
  return specs;
}

std::vector<int64_t> BlockSource::shape() const {
  const GgmlType* type = ggml_type(type_id);
  return {blocks.shape[0], blocks.shape[1] / type->block_bytes * type->block_elements};
}

HostTensor BlockSource::dequantize() const {
  const GgmlType* type = ggml_type(type_id);
  HostTensor out = HostTensor::zeros(DType::F32, shape());
  float* values = out.mutable_as<float>();
  const int64_t n_blocks = blocks.shape[0] * (blocks.shape[1] / type->block_bytes);
  for (int64_t b = 0; b < n_blocks; ++b)
    type->dequantize_block(blocks.data + b * type->block_bytes, values + b * type->block_elements);
  return out;
}

bool SourceModel::has(const std::string& name) const { return tensors.count(name) || block_sources.count(name); }

std::vector<int64_t> SourceModel::shape_of(const std::string& name) const {
  if (const auto t = tensors.find(name); t != tensors.end()) return t->second.shape;
  if (const auto b = block_sources.find(name); b != block_sources.end()) return b->second.shape();
  throw Error("source model has no tensor '" + name + "'");
}

HostTensor SourceModel::tensor(const std::string& name) const {
  if (const auto t = tensors.find(name); t != tensors.end()) return t->second;
  if (const auto b = block_sources.find(name); b != block_sources.end()) return b->second.dequantize();
  throw Error("source model has no tensor '" + name + "'");
}

namespace {

// Tensors a checkpoint may carry that the model does not read: Hugging Face Llama
// checkpoints of older transformers versions save RoPE buffers
// (model.layers.{i}.self_attn.rotary_emb.inv_freq), and a tied model's lm_head.weight is
// replaced by the embedding, as transformers does when it ties them.
bool ignored_source_tensor(const std::string& name, const ModelConfig& c) {
  return name.find(".rotary_emb.") != std::string::npos ||
         (c.tied_embeddings && name == std::string(kLmHeadModule) + ".weight");
}

// A tensor beyond the required ones means the config describes another model (a stray
// model.layers.9.*, or num_hidden_layers 4 beside five layers' tensors): the extra layer
// had been dropped silently.
void check_no_unused_tensors(const SourceModel& model, const std::vector<TensorSpec>& required,
                             const std::string& where) {
  std::set<std::string> used;
  for (const TensorSpec& spec : required) used.insert(spec.name);
  auto check = [&](const std::string& name) {
    if (!used.count(name) && !ignored_source_tensor(name, model.config))
      fail(where, unused_tensor_error(name, model.config.n_layers));
  };
  for (const auto& [name, tensor] : model.tensors) check(name);
  for (const auto& [name, blocks] : model.block_sources) check(name);
}

}  // namespace

void check_source_tensors(const SourceModel& model, const std::string& where) {
  const std::vector<TensorSpec> required = required_source_tensors(model.config);
  for (const TensorSpec& spec : required) {
    if (!model.has(spec.name)) fail(where, "missing tensor '" + spec.name + "'");
    const std::vector<int64_t> shape = model.shape_of(spec.name);
    if (shape != spec.shape)
      fail(where, "tensor '" + spec.name + "' has shape " + shape_string(shape) + ", expected " +
                      shape_string(spec.shape));
    const auto t = model.tensors.find(spec.name);
    if (t != model.tensors.end() && t->second.dtype != DType::F32 && t->second.dtype != DType::F16 &&
        t->second.dtype != DType::BF16)
      fail(where, "tensor '" + spec.name + "' has dtype " + dtype_name(t->second.dtype) +
                      ", expected F32, F16 or BF16");
  }
  check_no_unused_tensors(model, required, where);
}

void interleaved_to_rotate_half_qk(SourceModel& model) {
  for (int i = 0; i < model.config.n_layers; ++i) {
    const LayerTensorNames layer = layer_tensor_names(i);
    for (const std::string& projection : {layer.q, layer.k}) {
      // Rows of floats or of blocks alike.
      const auto blocks = model.block_sources.find(projection + ".weight");
      HostTensor& rows = blocks != model.block_sources.end() ? blocks->second.blocks
                                                              : model.tensors.at(projection + ".weight");
      rows = interleaved_to_rotate_half_rows(rows, model.config.head_dim);
    }
  }
}

namespace {

// Rows [first, first + count) of `t` [rows, cols]: a view sharing its owner.
HostTensor row_view(const HostTensor& t, int64_t first, int64_t count) {
  HostTensor view = t;
  view.shape[0] = count;
  view.data = t.data + size_t(first) * (t.nbytes() / size_t(t.shape[0]));
  return view;
}

}  // namespace

void split_fused_projections(SourceModel& model, const std::string& where) {
  const ModelConfig& c = model.config;
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerTensorNames layer = layer_tensor_names(i);
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    // The fused tensor `name` [sum of rows, dim] -> the parts (name, rows): views of its rows,
    // floats or blocks.
    const auto split = [&](const std::string& name, const std::vector<std::pair<std::string, int64_t>>& parts) {
      int64_t rows = 0;
      for (const auto& part : parts) rows += part.second;
      if (!model.has(name)) fail(where, "missing tensor '" + name + "'");
      const std::vector<int64_t> shape = model.shape_of(name);
      if (shape != std::vector<int64_t>{rows, c.dim})
        fail(where, "tensor '" + name + "' has shape " + shape_string(shape) + ", expected " +
                        shape_string({rows, c.dim}));
      for (const auto& part : parts)
        if (model.has(part.first)) fail(where, "holds both the fused '" + name + "' and its part '" + part.first + "'");
      const auto blocks = model.block_sources.find(name);
      int64_t first = 0;
      for (const auto& [part, part_rows] : parts) {
        if (blocks != model.block_sources.end())
          model.block_sources[part] = {blocks->second.type_id, row_view(blocks->second.blocks, first, part_rows)};
        else
          model.tensors[part] = row_view(model.tensors.at(name), first, part_rows);
        first += part_rows;
      }
      model.tensors.erase(name);
      model.block_sources.erase(name);
    };
    split(prefix + "self_attn.qkv_proj.weight",
          {{layer.q + ".weight", c.q_dim()}, {layer.k + ".weight", c.kv_dim()}, {layer.v + ".weight", c.kv_dim()}});
    split(prefix + "mlp.gate_up_proj.weight", {{layer.gate + ".weight", c.hidden_dim}, {layer.up + ".weight", c.hidden_dim}});
  }
}

HostTensor interleaved_to_rotate_half_rows(const HostTensor& weight, int head_dim) {
  const int64_t rows = weight.shape.empty() ? 0 : weight.shape[0];
  if (rows == 0 || head_dim <= 0 || head_dim % 2 != 0 || rows % head_dim != 0)
    throw Error("cannot reorder RoPE rows of a " + weight.shape_string() + " tensor with head_dim " +
                std::to_string(head_dim));
  const size_t row_bytes = weight.nbytes() / size_t(rows);
  const int half = head_dim / 2;
  HostTensor out = HostTensor::zeros(weight.dtype, weight.shape);
  uint8_t* dst = out.mutable_as<uint8_t>();
  for (int64_t head_start = 0; head_start < rows; head_start += head_dim)
    for (int i = 0; i < half; ++i) {
      std::memcpy(dst + (head_start + i) * row_bytes,
                  weight.data + (head_start + 2 * i) * row_bytes, row_bytes);
      std::memcpy(dst + (head_start + half + i) * row_bytes,
                  weight.data + (head_start + 2 * i + 1) * row_bytes, row_bytes);
    }
  return out;
}

}  // namespace gemlite
