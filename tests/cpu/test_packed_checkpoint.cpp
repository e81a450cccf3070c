// The packed checkpoint directory: what is saved loads back identically, per-module
// overrides resolve as documented, and every inconsistency is an Error naming the file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>

#include "models/import_llama2c.h"
#include "models/llama_weights.h"
#include "models/quantize_model.h"
#include "runtime/error.h"
#include "tests/cpu/io_test_helpers.h"
#include "tests/cpu/test_files.h"

namespace gemlite {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const SourceModel& stories() {
  static const SourceModel source = load_llama2c(shared_file("models/stories260K/stories260K.bin"));
  return source;
}

std::string save_stories(const std::string& format, std::vector<std::string> overrides = {}) {
  QuantizeSpec spec;
  spec.format = WeightFormat::parse(format);
  for (const auto& o : overrides) spec.overrides.push_back(parse_override(o));
  const std::string dir = make_temp_dir() + "/packed";
  save_packed_checkpoint(quantize_model(stories(), spec), dir);
  return dir;
}

void edit_config(const std::string& dir, const std::function<void(json&)>& edit) {
  json config = json::parse(std::ifstream(dir + "/config.json"));
  edit(config);
  std::ofstream(dir + "/config.json") << config.dump();
}

// Loading `dir` fails with one line that holds every fragment (the file and the problem).
void expect_load_error(const std::string& dir, const std::vector<std::string>& fragments) {
  expect_error_mentions([&] { load_packed_checkpoint(dir); }, fragments);
}

TEST(PackedCheckpoint, SavedModulesLoadBackWithTheirFormatsAndBytes) {
  const std::string dir = save_stories("q4g64", {"lm_head=q8", "mlp.down_proj=q6g32", "layers.1=fp6"});
  const PackedCheckpoint ckpt = load_packed_checkpoint(dir);
  EXPECT_EQ(ckpt.default_format, "q4g64");
  EXPECT_EQ(ckpt.lm_head.format.name(), "q8");
  EXPECT_FALSE(ckpt.lm_head_tied);
  EXPECT_EQ(ckpt.layers[0].q.format.name(), "q4g64");
  EXPECT_EQ(ckpt.layers[0].down.format.name(), "q6g32");
  EXPECT_EQ(ckpt.layers[1].down.format.name(), "fp6");  // the later pattern wins
  EXPECT_EQ(ckpt.layers[1].q.format.name(), "fp6");
  EXPECT_EQ(ckpt.embedding.dtype, DType::F16);
  EXPECT_EQ(ckpt.tokenizer_path, "");  // llama2.c source without --tokenizer

  // Every tensor's bytes equal what quantize_model produced in memory with the same spec:
  // each part of each projection (the overridden q8 / q6g32 / fp6 ones too), the
  // classifier, the embedding and the norms.
  QuantizeSpec spec;
  spec.format = WeightFormat::parse("q4g64");
  for (const char* o : {"lm_head=q8", "mlp.down_proj=q6g32", "layers.1=fp6"}) spec.overrides.push_back(parse_override(o));
  const PackedCheckpoint fresh = quantize_model(stories(), spec);
  const auto expect_same_bytes = [](const HostTensor& saved, const HostTensor& made, const std::string& what) {
    ASSERT_EQ(saved.nbytes(), made.nbytes()) << what;
    EXPECT_EQ(std::memcmp(saved.data, made.data, saved.nbytes()), 0) << what;
  };
  const auto expect_same_weight = [&](const PackedWeight& saved, const PackedWeight& made, const std::string& what) {
    EXPECT_EQ(saved.format.name(), made.format.name()) << what;
    ASSERT_EQ(saved.parts.size(), made.parts.size()) << what;
    for (const auto& [name, tensor] : made.parts) expect_same_bytes(saved.part(name), tensor, what + "." + name);
  };
  ASSERT_EQ(ckpt.layers.size(), fresh.layers.size());
  const char* const names[] = {"q", "k", "v", "o", "gate", "up", "down"};
  for (size_t l = 0; l < fresh.layers.size(); ++l) {
    const std::string layer = "layers." + std::to_string(l) + ".";
    const std::vector<const PackedWeight*> saved = ckpt.layers[l].linear_slots(), made = fresh.layers[l].linear_slots();
    for (size_t i = 0; i < made.size(); ++i) expect_same_weight(*saved[i], *made[i], layer + names[i]);
    expect_same_bytes(ckpt.layers[l].attn_norm, fresh.layers[l].attn_norm, layer + "attn_norm");
    expect_same_bytes(ckpt.layers[l].ffn_norm, fresh.layers[l].ffn_norm, layer + "ffn_norm");
  }
  expect_same_weight(ckpt.lm_head, fresh.lm_head, "lm_head");
  expect_same_bytes(ckpt.embedding, fresh.embedding, "embedding");
  expect_same_bytes(ckpt.final_norm, fresh.final_norm, "final_norm");
  EXPECT_TRUE(leftovers_beside(dir).empty());
}

TEST(PackedCheckpoint, TiedDenseClassifierIsStoredOnce) {
  const PackedCheckpoint ckpt = load_packed_checkpoint(save_stories("f16"));
  EXPECT_TRUE(ckpt.lm_head_tied);
  EXPECT_EQ(ckpt.lm_head.part("weight").data, ckpt.embedding.data);
}

TEST(PackedCheckpoint, OverridePatternsMatchWholeDottedParts) {
  QuantizeSpec spec;
  spec.format = WeightFormat::parse("q4g64");
  spec.overrides = {parse_override("layers.1=q8"), parse_override("q_proj=q2g32")};
  EXPECT_EQ(format_for_module(spec, "model.layers.1.mlp.up_proj").name(), "q8");
  EXPECT_EQ(format_for_module(spec, "model.layers.11.mlp.up_proj").name(), "q4g64");  // not "layers.1"
  EXPECT_EQ(format_for_module(spec, "model.layers.1.self_attn.q_proj").name(), "q2g32");
  EXPECT_EQ(format_for_module(spec, "lm_head").name(), "q4g64");
  EXPECT_THROW(parse_override("lm_head"), Error);
  EXPECT_THROW(parse_override("=q8"), Error);
  EXPECT_THROW(parse_override("lm_head=q0"), Error);
}

TEST(PackedCheckpoint, NotADirectoryOrNoConfigIsNamed) {
  expect_load_error("/nonexistent/dir", {"/nonexistent/dir", "not a directory"});
  const std::string empty = make_temp_dir();
  expect_load_error(empty, {empty + "/config.json", "missing"});
}

TEST(PackedCheckpoint, ForeignOrFutureConfigIsRejected) {
  std::string dir = save_stories("q8");
  edit_config(dir, [](json& c) { c.erase("quantization_config"); });
  expect_load_error(dir, {dir + "/config.json", "not a gemlite packed checkpoint"});

  dir = save_stories("q8");
  edit_config(dir, [](json& c) { c["quantization_config"]["format_version"] = 99; });
  expect_load_error(dir, {dir + "/config.json", "version 99"});

  // Version 1 differs only in the fp6/fp5 layout: a q8 checkpoint of it still loads, an
  // fp6 one is refused with a line that says to re-quantize.
  dir = save_stories("q8");
  edit_config(dir, [](json& c) { c["quantization_config"]["format_version"] = 1; });
  EXPECT_EQ(load_packed_checkpoint(dir).layers.size(), 5u);
  dir = save_stories("fp6");
  edit_config(dir, [](json& c) { c["quantization_config"]["format_version"] = 1; });
  expect_load_error(dir, {dir + "/config.json", "re-quantize"});

  dir = save_stories("q8");
  edit_config(dir, [](json& c) { c["quantization_config"]["modules"].erase("lm_head"); });
  expect_load_error(dir, {dir + "/config.json", "lm_head"});

  dir = save_stories("q8");
  edit_config(dir, [](json& c) { c["quantization_config"]["modules"]["lm_head"] = "q3g48"; });
  expect_load_error(dir, {dir + "/config.json", "lm_head", "q3g48"});

  // A key of the wrong JSON type is named with its value (nlohmann's "[json.exception...]"
  // text had reached the user), and a number JSON cannot hold names the file.
  dir = save_stories("q8");
  edit_config(dir, [](json& c) { c["quantization_config"]["format_version"] = "2"; });
  expect_load_error(dir, {dir + "/config.json", "quantization_config.format_version is \"2\", not an integer"});
  dir = save_stories("q8");
  edit_config(dir, [](json& c) { c["quantization_config"] = "gemlite"; });
  expect_load_error(dir, {dir + "/config.json", "quantization_config is \"gemlite\", not an object"});
  dir = save_stories("q8");
  edit_config(dir, [](json& c) { c["gemlite_chat_template"] = 5; });
  expect_load_error(dir, {dir + "/config.json", "gemlite_chat_template is 5, not a string"});
  dir = save_stories("q8");
  edit_config(dir, [](json& c) { c["quantization_config"]["modules"]["lm_head"] = 3; });
  expect_load_error(dir, {dir + "/config.json", "quantization_config.modules has no format for 'lm_head'"});
  dir = save_stories("q8");
  {  // a number no double holds: nlohmann's parser throws out_of_range, not parse_error
    std::ifstream in(dir + "/config.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\"quantization_config\"");
    ASSERT_NE(at, std::string::npos);
    text.insert(at, "\"huge\": 1e999, ");
    std::ofstream(dir + "/config.json") << text;
  }
  expect_load_error(dir, {dir + "/config.json", "not valid JSON (number overflow parsing '1e999')"});

  // Only the classifier can share the embedding: an o_proj marked "tied" was run with the
  // embedding's [vocab, dim] and wrote past its output on the CPU.
  dir = save_stories("f32");
  edit_config(dir, [](json& c) { c["quantization_config"]["modules"]["model.layers.0.self_attn.o_proj"] = "tied"; });
  expect_load_error(dir, {dir + "/config.json", "only lm_head"});
}

TEST(PackedCheckpoint, TensorsThatDisagreeWithTheConfigAreNamed) {
  std::string dir = save_stories("q4g64");
  edit_config(dir, [](json& c) { c["intermediate_size"] = 160; });
  expect_load_error(dir, {dir + "/model.safetensors", "gate_proj"});

  dir = save_stories("q4g64");
  edit_config(dir, [](json& c) { c["quantization_config"]["modules"]["model.layers.0.self_attn.q_proj"] = "q4g32"; });
  expect_load_error(dir, {dir + "/model.safetensors", "model.layers.0.self_attn.q_proj", "scales"});
}

// Tensors the config does not account for are refused (they had been ignored): a config
// of 4 layers beside five layers' tensors, or lm_head "tied" beside lm_head's own tensors.
TEST(PackedCheckpoint, TensorsTheConfigDoesNotUseAreNamed) {
  std::string dir = save_stories("q4g64");
  edit_config(dir, [](json& c) { c["num_hidden_layers"] = 4; });
  expect_load_error(dir, {dir + "/model.safetensors: tensor 'model.layers.4.input_layernorm.weight' is not used by "
                          "a 4-layer model: config and tensors disagree"});

  dir = save_stories("q4g64", {"lm_head=q8"});
  EXPECT_FALSE(load_packed_checkpoint(dir).lm_head_tied);
  edit_config(dir, [](json& c) { c["quantization_config"]["modules"]["lm_head"] = "tied"; });
  expect_load_error(dir, {dir + "/model.safetensors: tensor 'lm_head.qweight' is not used",
                          "lm_head \"tied\""});
}

// Norms and embeddings are checked like linear weights: a NaN in a norm (the audit's model
// printed <unk> and a perplexity of nan) or an embedding value beyond fp16 names the tensor.
TEST(PackedCheckpoint, QuantizeNamesANonFiniteNormOrAnEmbeddingBeyondFp16) {
  const std::string norm = "model.layers.2.post_attention_layernorm.weight";
  struct Case {
    std::string name;
    float value;
    std::string problem;  // a fragment of the message: what is wrong with the tensor
  };
  for (const Case& c : {Case{norm, NAN, "is not finite"}, Case{"model.embed_tokens.weight", 7e4f, "does not fit F16"}}) {
    SourceModel source = stories();
    std::vector<float> values = source.tensor(c.name).to_float();
    values[5] = c.value;
    source.tensors[c.name] = HostTensor::copy_of(DType::F32, source.shape_of(c.name), values.data());
    QuantizeSpec spec;
    spec.format = WeightFormat::parse("q8");  // embedding stored f16
    expect_error_mentions([&] { quantize_model(source, spec); }, {"tensor '" + c.name + "'", c.problem});
  }
}

// A copy of `t` whose element i holds `bits` (an F32 or F16 value's raw bits).
template <typename Bits>
HostTensor with_element(const HostTensor& t, int64_t i, Bits bits) {
  HostTensor copy = HostTensor::copy_of(t.dtype, t.shape, t.data);
  copy.mutable_as<Bits>()[i] = bits;
  return copy;
}

// A NaN norm or an inf fp16 scale had loaded, and gemlite-chat printed garbage with exit
// code 0. The loader checks norms, biases, scales and zeros (not the weight payloads) and
// names the file, the tensor, the value and where it is.
TEST(PackedCheckpoint, NonFiniteNormsBiasesScalesAndZerosAreNamed) {
  const uint32_t nan32 = 0x7fc00000u, inf32 = 0x7f800000u;
  const uint16_t inf16 = 0x7c00, nan16 = 0x7e00;
  struct Case {
    std::string format;
    std::function<void(PackedCheckpoint&)> damage;
    std::vector<std::string> fragments;  // beside the file's name
  };
  const std::vector<Case> cases = {
      {"q4g64", [&](PackedCheckpoint& c) { c.layers[2].ffn_norm = with_element(c.layers[2].ffn_norm, 5, nan32); },
       {"tensor 'model.layers.2.post_attention_layernorm.weight': value nan at 5 is not finite"}},
      {"q4g64", [&](PackedCheckpoint& c) { c.final_norm = with_element(c.final_norm, 63, inf32); },
       {"tensor 'model.norm.weight': value inf at 63 is not finite"}},
      {"q4g64", [&](PackedCheckpoint& c) { c.layers[1].v.parts["scales"] = with_element(c.layers[1].v.part("scales"), 3, inf16); },
       {"model.layers.1.self_attn.v_proj", "tensor 'scales': value inf at 3 is not finite"}},
      {"s7", [&](PackedCheckpoint& c) { c.layers[4].down.parts["zeros"] = with_element(c.layers[4].down.part("zeros"), 7, nan16); },
       {"model.layers.4.mlp.down_proj", "tensor 'zeros': value nan at 7 is not finite"}},
      {"fp6", [&](PackedCheckpoint& c) { c.lm_head.parts["scales"] = with_element(c.lm_head.part("scales"), 511, inf16); },
       {"lm_head", "tensor 'scales': value inf at 511 is not finite"}},
      {"q8", [&](PackedCheckpoint& c) {
         HostTensor bias = HostTensor::zeros(DType::F32, {64});  // [N] of o_proj
         c.layers[0].o.parts["bias"] = with_element(bias, 9, inf32 | 0x80000000u);
       },
       {"model.layers.0.self_attn.o_proj", "tensor 'bias': value -inf at 9 is not finite"}},
  };
  for (const Case& c : cases) {
    QuantizeSpec spec;
    spec.format = WeightFormat::parse(c.format);
    PackedCheckpoint ckpt = quantize_model(stories(), spec);
    const std::string dir = make_temp_dir() + "/packed";
    save_packed_checkpoint(ckpt, dir);
    EXPECT_NO_THROW(load_packed_checkpoint(dir)) << c.format;  // undamaged, it loads
    c.damage(ckpt);
    save_packed_checkpoint(ckpt, dir);
    std::vector<std::string> fragments = c.fragments;
    fragments.push_back(dir + "/model.safetensors: ");
    expect_load_error(dir, fragments);
  }
}

TEST(PackedCheckpoint, SaveRefusesToReplaceSomethingElse) {
  const std::string dir = make_temp_dir();
  std::ofstream(dir + "/precious.txt") << "keep me";
  QuantizeSpec spec;
  spec.format = WeightFormat::parse("q8");
  EXPECT_THROW(save_packed_checkpoint(quantize_model(stories(), spec), dir), Error);
  EXPECT_TRUE(fs::exists(dir + "/precious.txt"));
  EXPECT_TRUE(leftovers_beside(dir).empty());
}

// The writer works in a folder of its own: a user's "<dir>.tmp" beside the output is left
// alone, an earlier checkpoint is replaced whole, and an empty output name is refused
// before anything is written.
TEST(PackedCheckpoint, SaveTouchesOnlyWhatItCreated) {
  const std::string parent = make_temp_dir(), dir = parent + "/model";
  fs::create_directories(dir + ".tmp");
  std::ofstream(dir + ".tmp/keep.txt") << "mine";
  QuantizeSpec spec;
  spec.format = WeightFormat::parse("q8");
  const PackedCheckpoint ckpt = quantize_model(stories(), spec);
  save_packed_checkpoint(ckpt, dir);
  spec.format = WeightFormat::parse("q4g64");
  save_packed_checkpoint(quantize_model(stories(), spec), dir);  // replaces the q8 one
  EXPECT_EQ(load_packed_checkpoint(dir).default_format, "q4g64");
  EXPECT_TRUE(fs::exists(dir + ".tmp/keep.txt"));
  EXPECT_EQ(leftovers_beside(dir), std::vector<std::string>{"model.tmp"});  // the user's own
  // Under a regular file: refused up front (it had failed only when the checkpoint was written).
  const std::string file = make_temp_dir() + "/a-file";
  std::ofstream(file) << "x";
  for (const std::string& bad : {std::string(""), std::string("."), std::string("/"), file + "/out", file + "/sub/out"}) {
    EXPECT_THROW(save_packed_checkpoint(ckpt, bad), Error) << "'" << bad << "'";
    EXPECT_THROW(check_can_save_packed_checkpoint(bad), Error) << "'" << bad << "'";
  }
  EXPECT_NO_THROW(check_can_save_packed_checkpoint(make_temp_dir() + "/missing/parents/out"));
}

}  // namespace
}  // namespace gemlite
