#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "models/import_hf.h"
#include "models/import_llama2c.h"
#include "runtime/io/json_file.h"
#include "runtime/io/safetensors.h"
#include "tests/cpu/io_test_helpers.h"
#include "tests/cpu/test_files.h"

namespace gemlite {
namespace {

namespace fs = std::filesystem;

const std::string kModels = shared_file("models");
const std::string kStories = kModels + "/stories260K/stories260K.bin";
const std::string kGutenberg = kModels + "/gutenberg-llama-25m";

// stories260K.bin read without the importer: the header and every float after it.
struct RawLlama2c {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  std::vector<float> values;
};

RawLlama2c read_raw_llama2c(const std::string& path) {
  const std::string bytes = read_bytes(path);
  RawLlama2c raw;
  std::memcpy(&raw.dim, bytes.data(), 7 * sizeof(int32_t));
  raw.values.resize((bytes.size() - 28) / sizeof(float));
  std::memcpy(raw.values.data(), bytes.data() + 28, raw.values.size() * sizeof(float));
  return raw;
}

void expect_row_equals(const HostTensor& tensor, int64_t row, const float* expected) {
  const int64_t cols = tensor.shape[1];
  EXPECT_EQ(std::memcmp(tensor.as<float>() + row * cols, expected, cols * sizeof(float)), 0) << "row " << row;
}

void expect_same_floats(const HostTensor& tensor, const float* expected) {
  EXPECT_EQ(std::memcmp(tensor.data, expected, tensor.nbytes()), 0) << tensor.shape_string();
}

TEST(ImportLlama2c, LoadsStories260K) {
  const SourceModel model = load_llama2c(kStories);
  const ModelConfig& c = model.config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_id, 2);
  EXPECT_EQ(model.tensors.count("lm_head.weight"), 0u);
  EXPECT_EQ(model.tensors.at("model.layers.4.self_attn.k_proj.weight").shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(model.tensors.at("model.layers.4.mlp.down_proj.weight").shape, (std::vector<int64_t>{64, 172}));
  check_source_tensors(model, kStories);
}

TEST(ImportLlama2c, MatchesTheRawFileWithQueryAndKeyRowsInRotateHalfOrder) {
  const SourceModel model = load_llama2c(kStories);
  const RawLlama2c raw = read_raw_llama2c(kStories);
  const int64_t D = raw.dim, H = raw.hidden_dim, L = raw.n_layers, V = raw.vocab_size;
  const int64_t hd = D / raw.n_heads, KV = raw.n_kv_heads * hd;

  // Offsets of each [n_layers, ...] block in llama2.c order.
  size_t offset = 0;
  auto block = [&](int64_t count) { const float* start = raw.values.data() + offset; offset += count; return start; };
  const float* embedding = block(V * D);
  const float* attn_norm = block(L * D);
  const float* wq = block(L * D * D);
  const float* wk = block(L * KV * D);
  const float* wv = block(L * KV * D);
  const float* wo = block(L * D * D);
  const float* ffn_norm = block(L * D);
  const float* w1 = block(L * H * D);
  const float* w2 = block(L * D * H);
  const float* w3 = block(L * H * D);
  const float* final_norm = block(D);

  expect_same_floats(model.tensors.at("model.embed_tokens.weight"), embedding);
  expect_same_floats(model.tensors.at("model.norm.weight"), final_norm);
  for (int64_t l = 0; l < L; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    auto tensor = [&](const std::string& suffix) {
      return model.tensors.at("model.layers." + std::to_string(l) + "." + suffix);
    };
    expect_same_floats(tensor("input_layernorm.weight"), attn_norm + l * D);
    expect_same_floats(tensor("self_attn.v_proj.weight"), wv + l * KV * D);
    expect_same_floats(tensor("self_attn.o_proj.weight"), wo + l * D * D);
    expect_same_floats(tensor("post_attention_layernorm.weight"), ffn_norm + l * D);
    expect_same_floats(tensor("mlp.gate_proj.weight"), w1 + l * H * D);
    expect_same_floats(tensor("mlp.down_proj.weight"), w2 + l * D * H);
    expect_same_floats(tensor("mlp.up_proj.weight"), w3 + l * H * D);

    // Within a head, rotate-half row i pairs with row i + hd/2; Meta's pairs are adjacent.
    auto expect_rotate_half = [&](const HostTensor& hf, const float* meta, int64_t rows) {
      for (int64_t head = 0; head < rows; head += hd)
        for (int64_t i = 0; i < hd / 2; ++i) {
          expect_row_equals(hf, head + i, meta + (head + 2 * i) * D);
          expect_row_equals(hf, head + hd / 2 + i, meta + (head + 2 * i + 1) * D);
        }
    };
    expect_rotate_half(tensor("self_attn.q_proj.weight"), wq + l * D * D, D);
    expect_rotate_half(tensor("self_attn.k_proj.weight"), wk + l * KV * D, KV);
  }
}

TEST(ImportLlama2c, LoadsAidreams260KWithPlainMultiHeadAttention) {
  const SourceModel model = load_llama2c(kModels + "/aidreams260K/aidreams260K.bin");
  EXPECT_EQ(model.config.n_layers, 4);
  EXPECT_EQ(model.config.n_heads, 4);
  EXPECT_EQ(model.config.n_kv_heads, 4);
  EXPECT_EQ(model.config.max_seq_len, 128);
}

TEST(ImportLlama2c, RejectsTruncatedOrPaddedFiles) {
  ScratchDir dir;
  const std::string bytes = read_bytes(kStories);
  ASSERT_EQ(bytes.size(), 1056540u);
  const std::string truncated = dir.file("truncated.bin");
  write_bytes(truncated, bytes.substr(0, bytes.size() - 100));
  expect_error_mentions([&] { load_llama2c(truncated); },
                        {truncated, "truncated: expected 1056540 bytes, found 1056440"});
  const std::string padded = dir.file("padded.bin");
  write_bytes(padded, bytes + "junk");
  expect_error_mentions([&] { load_llama2c(padded); }, {padded, "trailing data"});
  const std::string header_only = dir.file("header_only.bin");
  write_bytes(header_only, bytes.substr(0, 20));
  expect_error_mentions([&] { load_llama2c(header_only); }, {header_only, "truncated"});
}

TEST(ImportLlama2c, RejectsNonsenseHeaders) {
  ScratchDir dir;
  auto with_field = [&](int field, int32_t value) {
    std::string bytes = read_bytes(kStories);
    std::memcpy(&bytes[field * sizeof(int32_t)], &value, sizeof(value));
    const std::string path = dir.file("field" + std::to_string(field) + ".bin");
    write_bytes(path, bytes);
    return path;
  };
  const std::string odd_heads = with_field(3, 7);
  expect_error_mentions([&] { load_llama2c(odd_heads); }, {odd_heads, "not divisible by n_heads 7"});
  const std::string no_layers = with_field(2, 0);
  expect_error_mentions([&] { load_llama2c(no_layers); }, {no_layers, "n_layers = 0"});
  // Only vocab_size's sign means something (a separate classifier): a negative dim or seq_len
  // is named by its llama2.c field, not by the Hugging Face key it becomes.
  const std::string negative_dim = with_field(0, -64);
  expect_error_mentions([&] { load_llama2c(negative_dim); }, {negative_dim, "header field dim = -64"});
  const std::string negative_seq = with_field(6, -1);
  expect_error_mentions([&] { load_llama2c(negative_seq); }, {negative_seq, "header field seq_len = -1"});
  // A vocabulary too small for llama2.c's <unk>, <s>, </s>, either sign: named as the header
  // field (it had been "'bos_token_id' 1 is outside the vocabulary").
  for (const int vocab : {-1, 2}) {
    const std::string tiny_vocab = with_field(5, vocab);
    expect_error_mentions([&] { load_llama2c(tiny_vocab); },
                          {tiny_vocab, "header field vocab_size = " + std::to_string(vocab) + " is out of range"});
  }
}

TEST(ImportHf, LoadsTheShardedGutenbergCheckpoint) {
  const SourceModel model = load_hf_directory(kGutenberg);
  const ModelConfig& c = model.config;  // its fields: ModelConfig.ParsesTheGutenbergCheckpointConfig
  EXPECT_EQ(model.tokenizer_path, kGutenberg + "/tokenizer.model");
  for (const TensorSpec& spec : required_source_tensors(c)) {
    SCOPED_TRACE(spec.name);
    const HostTensor& t = model.tensors.at(spec.name);
    EXPECT_EQ(t.dtype, DType::BF16);
    EXPECT_EQ(t.shape, spec.shape);
    EXPECT_NE(t.owner, nullptr);
  }
  EXPECT_EQ(model.tensors.at("model.layers.3.self_attn.k_proj.weight").shape, (std::vector<int64_t>{128, 384}));
  EXPECT_EQ(model.tensors.count("lm_head.weight"), 0u);
}

// A checkpoint directory of links to the gutenberg files, minus `left_out`.
void link_gutenberg_files(const ScratchDir& dir, const std::string& left_out) {
  for (const auto& entry : fs::directory_iterator(kGutenberg))
    if (entry.path().filename() != left_out)
      fs::create_symlink(fs::absolute(entry.path()), dir.file(entry.path().filename().string()));
}

TEST(ImportHf, NamesAMissingShard) {
  ScratchDir dir;
  link_gutenberg_files(dir, "model-00002-of-00004.safetensors");
  expect_error_mentions([&] { load_hf_directory(dir.path()); },
                        {dir.file("model.safetensors.index.json"), "model-00002-of-00004.safetensors"});
}

TEST(ImportHf, NamesATensorAbsentFromItsShard) {
  ScratchDir dir;
  link_gutenberg_files(dir, "model.safetensors.index.json");
  nlohmann::json index = read_json_file(kGutenberg + "/model.safetensors.index.json");
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00004.safetensors";
  std::ofstream(dir.file("model.safetensors.index.json")) << index.dump();
  expect_error_mentions([&] { load_hf_directory(dir.path()); },
                        {dir.file("model-00001-of-00004.safetensors"), "no tensor 'model.norm.weight'"});
}

// A tiny untied qwen2 model in one model.safetensors, every tensor zero.
ModelConfig tiny_qwen2() {
  ModelConfig c;
  c.architecture = "qwen2";
  c.dim = 16;
  c.hidden_dim = 40;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.vocab_size = 64;
  c.max_seq_len = 128;
  c.qkv_bias = true;
  return c;
}

void write_hf_directory(const ScratchDir& dir, const ModelConfig& config, const std::string& skipped_tensor,
                        const std::vector<TensorSpec>& extra_tensors = {}) {
  std::ofstream(dir.file("config.json")) << to_hf_config(config).dump(2);
  SafetensorsWriter writer;
  for (const TensorSpec& spec : required_source_tensors(config))
    if (spec.name != skipped_tensor) writer.add(spec.name, HostTensor::zeros(DType::F16, spec.shape));
  for (const TensorSpec& spec : extra_tensors) writer.add(spec.name, HostTensor::zeros(DType::F16, spec.shape));
  writer.write(dir.file("model.safetensors"));
}

TEST(ImportHf, LoadsASingleFileCheckpointWithBiases) {
  ScratchDir dir;
  write_hf_directory(dir, tiny_qwen2(), "");
  const SourceModel model = load_hf_directory(dir.path());
  EXPECT_TRUE(model.config.qkv_bias);
  EXPECT_EQ(model.tensors.at("model.layers.1.self_attn.k_proj.bias").shape, std::vector<int64_t>{8});
  EXPECT_EQ(model.tensors.at("lm_head.weight").dtype, DType::F16);
  EXPECT_EQ(model.tokenizer_path, "");
}

TEST(ImportHf, NamesAMissingOrMisshapenTensor) {
  ScratchDir dir;
  write_hf_directory(dir, tiny_qwen2(), "model.layers.1.self_attn.v_proj.bias");
  expect_error_mentions([&] { load_hf_directory(dir.path()); },
                        {dir.path(), "missing tensor 'model.layers.1.self_attn.v_proj.bias'"});

  ModelConfig wider = tiny_qwen2();
  wider.hidden_dim = 48;
  write_hf_directory(dir, wider, "");
  std::ofstream(dir.file("config.json")) << to_hf_config(tiny_qwen2()).dump(2);
  expect_error_mentions([&] { load_hf_directory(dir.path()); },
                        {"model.layers.0.mlp.gate_proj.weight", "has shape [48, 16], expected [40, 16]"});
}

// A tensor the config does not use means they describe different models: a config that
// says 2 layers beside three layers' tensors, or a stray layer 9, had been converted
// without them. RoPE buffers (older transformers' rotary_emb.inv_freq) and a tied model's
// lm_head.weight (transformers ties it to the embedding) are ignored, as transformers does.
TEST(ImportHf, NamesATensorTheConfigDoesNotUse) {
  ScratchDir dir;
  ModelConfig three_layers = tiny_qwen2();
  three_layers.n_layers = 3;
  write_hf_directory(dir, three_layers, "");
  std::ofstream(dir.file("config.json")) << to_hf_config(tiny_qwen2()).dump(2);
  expect_error_mentions([&] { load_hf_directory(dir.path()); },
                        {dir.path() + ": tensor 'model.layers.2.input_layernorm.weight' is not used by a 2-layer model",
                         "config and tensors disagree"});

  write_hf_directory(dir, tiny_qwen2(), "", {{"model.layers.9.mlp.up_proj.weight", {40, 16}}});
  expect_error_mentions([&] { load_hf_directory(dir.path()); },
                        {dir.path() + ": tensor 'model.layers.9.mlp.up_proj.weight' is not used by a 2-layer model"});

  ModelConfig tied = tiny_qwen2();
  tied.tied_embeddings = true;
  write_hf_directory(dir, tied, "",
                     {{"model.layers.0.self_attn.rotary_emb.inv_freq", {2}}, {"lm_head.weight", {64, 16}}});
  const SourceModel model = load_hf_directory(dir.path());
  EXPECT_TRUE(model.config.tied_embeddings);
  EXPECT_EQ(model.config.n_layers, 2);
  // Untied, the same lm_head.weight is required and used; a stray lm_head.bias is not.
  write_hf_directory(dir, tiny_qwen2(), "", {{"lm_head.bias", {64}}});
  expect_error_mentions([&] { load_hf_directory(dir.path()); },
                        {dir.path() + ": tensor 'lm_head.bias' is not used by this model"});
}

TEST(ImportHf, NamesTheMissingConfigOrWeights) {
  ScratchDir dir;
  expect_error_mentions([&] { load_hf_directory(dir.path()); }, {dir.file("config.json"), "no such file"});
  std::ofstream(dir.file("config.json")) << to_hf_config(tiny_qwen2()).dump(2);
  expect_error_mentions([&] { load_hf_directory(dir.path()); }, {dir.path(), "model.safetensors"});
}

}  // namespace
}  // namespace gemlite
