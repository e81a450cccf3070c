#include "models/import_llama2c.h"

#include <cstdlib>
#include <cstring>

#include "models/llama_weights.h"
#include "runtime/error.h"
#include "runtime/io/mapped_file.h"

namespace gemlite {

namespace {

// dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len (all int32).
constexpr int kHeaderFields = 7;
constexpr size_t kHeaderBytes = kHeaderFields * sizeof(int32_t);
// Later llama2.c export versions start with this magic ("ak42") instead of a v0 header.
constexpr int32_t kVersionedExportMagic = 0x616b3432;
// Generous bounds that keep size arithmetic far from overflow on a garbage header.
constexpr int32_t kMaxLayers = 4096;
constexpr int32_t kMaxSize = 1 << 20;

// One stretch of fp32 values in the file; an empty name marks data that is skipped.
struct Segment {
  std::string name;
  std::vector<int64_t> shape;
};

ModelConfig config_from_header(const std::string& path, const int32_t (&header)[kHeaderFields]) {
  static const char* const kFieldNames[kHeaderFields] = {
      "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  if (header[0] == kVersionedExportMagic)
    fail(path, "llama2.c versioned export (magic 'ak42') is not supported; only the legacy v0 layout");
  for (int i = 0; i < kHeaderFields; ++i) {
    // vocab_size's sign marks the classifier; any other field is a positive count. A
    // vocabulary holds at least llama2.c's <unk>, <s> and </s> (ids 0, 1, 2): with fewer,
    // the error had come later, about a "bos_token_id" this file does not have.
    const int64_t value = i == 5 ? std::abs(int64_t(header[i])) : header[i];
    const int64_t lowest = i == 5 ? 3 : 1, limit = i == 2 ? kMaxLayers : kMaxSize;
    if (value < lowest || value > limit)
      fail(path, std::string("header field ") + kFieldNames[i] + " = " + std::to_string(header[i]) +
                     " is out of range (not a llama2.c v0 checkpoint?)");
  }
  ModelConfig c;
  c.architecture = "llama";
  c.dim = header[0];
  c.hidden_dim = header[1];
  c.n_layers = header[2];
  c.n_heads = header[3];
  c.n_kv_heads = header[4];
  c.vocab_size = std::abs(header[5]);
  c.max_seq_len = header[6];
  c.tied_embeddings = header[5] > 0;  // a negative vocab_size means a separate classifier follows
  c.rope_theta = 10000.0f;
  c.norm_eps = 1e-5f;
  if (c.dim % c.n_heads != 0)
    fail(path, "header dim " + std::to_string(c.dim) + " is not divisible by n_heads " +
                   std::to_string(c.n_heads));
  if (c.n_heads % c.n_kv_heads != 0)
    fail(path, "header n_heads " + std::to_string(c.n_heads) + " is not divisible by n_kv_heads " +
                   std::to_string(c.n_kv_heads));
  c.head_dim = c.dim / c.n_heads;
  c.validate(path);
  return c;
}

// The file's tensors in storage order. llama2.c stores each kind of weight for all layers
// together ([n_layers, ...]), so a layer's tensors are spread across the file.
std::vector<Segment> file_layout(const ModelConfig& c) {
  const int64_t dim = c.dim, hidden = c.hidden_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  std::vector<Segment> layout = {{kEmbeddingName, {c.vocab_size, dim}}};
  auto for_each_layer = [&](std::string LayerTensorNames::*member, const char* suffix,
                            std::vector<int64_t> shape) {
    for (int i = 0; i < c.n_layers; ++i) layout.push_back({layer_tensor_names(i).*member + suffix, shape});
  };
  for_each_layer(&LayerTensorNames::attn_norm, "", {dim});                 // rms_att_weight
  for_each_layer(&LayerTensorNames::q, ".weight", {q_dim, dim});           // wq
  for_each_layer(&LayerTensorNames::k, ".weight", {kv_dim, dim});          // wk
  for_each_layer(&LayerTensorNames::v, ".weight", {kv_dim, dim});          // wv
  for_each_layer(&LayerTensorNames::o, ".weight", {dim, q_dim});           // wo
  for_each_layer(&LayerTensorNames::ffn_norm, "", {dim});                  // rms_ffn_weight
  for_each_layer(&LayerTensorNames::gate, ".weight", {hidden, dim});       // w1
  for_each_layer(&LayerTensorNames::down, ".weight", {dim, hidden});       // w2
  for_each_layer(&LayerTensorNames::up, ".weight", {hidden, dim});         // w3
  layout.push_back({kFinalNormName, {dim}});                               // rms_final_weight
  // The legacy RoPE table (freq_cis_real, freq_cis_imag): the runtime computes its own.
  layout.push_back({"", {c.max_seq_len, c.head_dim / 2}});
  layout.push_back({"", {c.max_seq_len, c.head_dim / 2}});
  if (!c.tied_embeddings)
    layout.push_back({std::string(kLmHeadModule) + ".weight", {c.vocab_size, dim}});  // wcls
  return layout;
}

size_t segment_bytes(const Segment& segment) {
  size_t count = 1;
  for (int64_t d : segment.shape) count *= size_t(d);
  return count * sizeof(float);
}

size_t file_bytes(const std::vector<Segment>& layout) {
  size_t bytes = kHeaderBytes;
  for (const Segment& segment : layout) bytes += segment_bytes(segment);
  return bytes;
}

}  // namespace

SourceModel load_llama2c(const std::string& bin_path) {
  const std::shared_ptr<const MappedFile> file = MappedFile::open(bin_path);
  if (file->size() < kHeaderBytes)
    fail(bin_path, "truncated: expected at least " + std::to_string(kHeaderBytes) +
                       " bytes (the header), found " + std::to_string(file->size()));
  int32_t header[kHeaderFields];
  std::memcpy(header, file->data(), kHeaderBytes);

  SourceModel model;
  model.config = config_from_header(bin_path, header);
  const std::vector<Segment> layout = file_layout(model.config);
  const size_t expected = file_bytes(layout);
  if (file->size() != expected)
    fail(bin_path, std::string(file->size() < expected ? "truncated" : "trailing data") + ": expected " +
                       std::to_string(expected) + " bytes, found " + std::to_string(file->size()));

  const uint8_t* next = file->data() + kHeaderBytes;
  for (const Segment& segment : layout) {
    if (!segment.name.empty())
      model.tensors[segment.name] = HostTensor::copy_of(DType::F32, segment.shape, next);
    next += segment_bytes(segment);
  }

  // llama2.c (like Meta's checkpoints) rotates interleaved pairs; the runtime rotates halves.
  interleaved_to_rotate_half_qk(model);
  return model;
}

}  // namespace gemlite
