#include <gtest/gtest.h>

#include "tests/cpu/test_files.h"

#include "models/model_config.h"
#include "runtime/io/json_file.h"
#include "tests/cpu/io_test_helpers.h"
#include "tests/cpu/source_model_checks.h"

namespace gemlite {
namespace {

using nlohmann::json;

const char* kWhere = "test/config.json";

// Llama 3.1 8B as transformers 4 writes it.
json llama31_transformers4() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "hidden_act": "silu",
    "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "attention_bias": false, "mlp_bias": false, "tie_word_embeddings": false,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16"
  })");
}

// The same model as transformers 5 writes it: rope settings move into rope_parameters.
json llama31_transformers5() {
  json config = llama31_transformers4();
  config.erase("rope_theta");
  config.erase("rope_scaling");
  config.erase("torch_dtype");
  config["dtype"] = "bfloat16";
  config["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "llama3"}, {"factor", 8.0},
                               {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                               {"original_max_position_embeddings", 8192}};
  return config;
}

json qwen2_05b() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
    "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "use_sliding_window": false, "tie_word_embeddings": true,
    "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16"
  })");
}

void expect_llama31(const ModelConfig& c) {
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.dim, 4096);
  EXPECT_EQ(c.hidden_dim, 14336);
  EXPECT_EQ(c.n_layers, 32);
  EXPECT_EQ(c.n_heads, 32);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 8192);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.bos_id, 128000);
  EXPECT_EQ(c.eos_id, 128001);  // the first of the listed end tokens
}

void expect_config_error(const json& config, const std::vector<std::string>& fragments) {
  std::vector<std::string> expected = fragments;
  expected.push_back(kWhere);
  expect_error_mentions([&] { parse_hf_config(config, kWhere); }, expected);
}

TEST(ModelConfig, ParsesTransformers4Llama3WithRopeScaling) {
  expect_llama31(parse_hf_config(llama31_transformers4(), kWhere));
}

TEST(ModelConfig, ParsesTransformers5RopeParameters) {
  expect_llama31(parse_hf_config(llama31_transformers5(), kWhere));
}

TEST(ModelConfig, ParsesRopeScalingSpelledWithType) {
  json config = llama31_transformers4();
  config["rope_scaling"].erase("rope_type");
  config["rope_scaling"]["type"] = "llama3";  // transformers before 4.43
  expect_llama31(parse_hf_config(config, kWhere));
}

TEST(ModelConfig, ParsesTheGutenbergCheckpointConfig) {
  const std::string path = shared_file("models/gutenberg-llama-25m/config.json");
  const ModelConfig c = parse_hf_config(read_json_file(path), path);
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.dim, 384);
  EXPECT_EQ(c.hidden_dim, 1024);
  EXPECT_EQ(c.n_layers, 8);
  EXPECT_EQ(c.n_heads, 6);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.max_seq_len, 1024);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_TRUE(c.tied_embeddings);
}

TEST(ModelConfig, Qwen2HasQkvBiasAndTiedEmbeddings) {
  const ModelConfig c = parse_hf_config(qwen2_05b(), kWhere);
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_seq_len, 32768);  // its sliding window is switched off
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
}

TEST(ModelConfig, ExplicitHeadDimOverridesHiddenSizeOverHeads) {
  json config = llama31_transformers4();
  config["hidden_size"] = 3000;  // not a multiple of 32 heads: only head_dim makes it valid
  config["head_dim"] = 64;
  EXPECT_EQ(parse_hf_config(config, kWhere).head_dim, 64);
}

TEST(ModelConfig, MistralDerivesNullHeadDimAndStopsAtItsWindow) {
  json config = llama31_transformers4();
  config["model_type"] = "mistral";
  config["architectures"] = {"MistralForCausalLM"};
  config["head_dim"] = nullptr;
  config["sliding_window"] = 4096;
  config["rope_scaling"] = nullptr;
  const ModelConfig c = parse_hf_config(config, kWhere);
  EXPECT_EQ(c.architecture, "mistral");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_seq_len, 4096);
  EXPECT_EQ(c.rope_scaling.type, "none");
}

// A config with both groups (a transformers 5 file that kept its old key): used when they
// agree, an error naming both when they do not (one of them would be silently ignored).
TEST(ModelConfig, RopeParametersAndRopeScalingMustAgree) {
  const json old_style = llama31_transformers4();
  ASSERT_TRUE(old_style.contains("rope_scaling"));
  json both = old_style;
  both["rope_parameters"] = old_style["rope_scaling"];
  both["rope_parameters"]["rope_theta"] = old_style["rope_theta"];
  expect_same_config(parse_hf_config(both, kWhere), parse_hf_config(old_style, kWhere));
  both["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  expect_config_error(both, {"'rope_parameters' and 'rope_scaling' describe different", "default vs llama3"});
}

TEST(ModelConfig, ArchitecturesListStandsInForModelType) {
  json config = qwen2_05b();
  config.erase("model_type");
  EXPECT_EQ(parse_hf_config(config, kWhere).architecture, "qwen2");
}

TEST(ModelConfig, RoundTripsThroughTransformers4Keys) {
  for (const json& original : {llama31_transformers5(), qwen2_05b()}) {
    const ModelConfig c = parse_hf_config(original, kWhere);
    const json written = to_hf_config(c);
    EXPECT_TRUE(written.contains("rope_theta"));
    EXPECT_TRUE(written.contains("rope_scaling"));
    EXPECT_FALSE(written.contains("rope_parameters"));
    expect_same_config(parse_hf_config(written, kWhere), c);
  }
  EXPECT_EQ(to_hf_config(parse_hf_config(llama31_transformers4(), kWhere))["rms_norm_eps"].dump(), "1e-05");
}

TEST(ModelConfig, RejectsUnknownArchitectures) {
  json config = llama31_transformers4();
  config["model_type"] = "gpt2";
  expect_config_error(config, {"unknown architecture 'gpt2'", "llama, mistral, qwen2"});
  config.erase("model_type");
  config["architectures"] = {"GPT2LMHeadModel"};
  expect_config_error(config, {"unknown architecture 'GPT2LMHeadModel'"});
}

// Phi-3: the Llama computation (fused tensors are split by the importers); its sliding
// window caps the context; RoPE over part of a head (partial_rotary_factor, at the top
// level in transformers 4, in rope_parameters in 5) and longrope scaling are refused.
TEST(ModelConfig, Phi3SlidingWindowAndRefusedRopeVariants) {
  json config = llama31_transformers4();
  config["model_type"] = "phi3";
  config.erase("rope_scaling");
  config["sliding_window"] = 2047;
  const ModelConfig c = parse_hf_config(config, kWhere);
  EXPECT_EQ(c.architecture, "phi3");
  EXPECT_EQ(c.max_seq_len, 2047);
  json negative = config;
  negative["sliding_window"] = -1;
  expect_config_error(negative, {"sliding_window", "must be positive or null, got -1"});
  json partial = config;
  partial["partial_rotary_factor"] = 0.75;
  expect_config_error(partial, {"partial_rotary_factor", "only 1"});
  partial = config;
  partial["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}};
  expect_config_error(partial, {"rope_parameters.partial_rotary_factor"});
  partial["rope_parameters"]["partial_rotary_factor"] = 1.0;  // what transformers 5 writes for Phi-3
  EXPECT_EQ(parse_hf_config(partial, kWhere).architecture, "phi3");
  json longrope = config;
  longrope["rope_scaling"] = {{"type", "longrope"}, {"long_factor", {1.0}}, {"short_factor", {1.0}}};
  expect_config_error(longrope, {"'longrope' is not supported"});
}

TEST(ModelConfig, RejectsMissingOrMistypedKeys) {
  json config = llama31_transformers4();
  config.erase("hidden_size");
  expect_config_error(config, {"missing 'hidden_size'"});
  config = llama31_transformers4();
  config["num_hidden_layers"] = "32";
  expect_config_error(config, {"'num_hidden_layers' must be an integer"});
  config = llama31_transformers4();
  config["max_position_embeddings"] = int64_t(100000000000);  // an integer, not an int
  expect_config_error(config, {"'max_position_embeddings' is out of range (100000000000"});
  config = llama31_transformers4();
  config["rope_scaling"].erase("factor");
  expect_config_error(config, {"missing 'rope_scaling.factor'"});
}

TEST(ModelConfig, RejectsInconsistentShapes) {
  json config = llama31_transformers4();
  config["num_key_value_heads"] = 5;
  expect_config_error(config, {"'num_attention_heads' (32) is not a multiple of 'num_key_value_heads' (5)"});
  config = llama31_transformers4();
  config["hidden_size"] = 4090;
  expect_config_error(config, {"'hidden_size' (4090) is not divisible by 'num_attention_heads' (32)"});
  config = llama31_transformers4();
  config["intermediate_size"] = 0;
  expect_config_error(config, {"'intermediate_size' must be positive"});
  // Found by the bad-input audit: head products that wrapped int, layer counts that
  // exhausted memory, and floats that parsed to inf (saved later as null).
  config = llama31_transformers4();
  config["num_attention_heads"] = 201326598;
  config["num_key_value_heads"] = 67108866;
  config["head_dim"] = 64;
  expect_config_error(config, {"num_attention_heads x head_dim", "2^24"});
  config = llama31_transformers4();
  config["num_hidden_layers"] = 2000000000;
  expect_config_error(config, {"'num_hidden_layers' 2000000000"});
  for (const char* key : {"rope_theta", "rms_norm_eps"}) {
    config = llama31_transformers4();
    config[key] = 1e40;
    expect_config_error(config, {std::string("'") + key + "' must be positive and finite"});
  }
  config = llama31_transformers4();
  config["rope_scaling"]["factor"] = 1e40;
  expect_config_error(config, {"'rope_scaling' factors must be positive and finite"});
  for (const double low : {0.0, -1.0}) {  // it divides the original context
    config = llama31_transformers4();
    config["rope_scaling"]["low_freq_factor"] = low;
    expect_config_error(config, {"'rope_scaling' factors must be positive and finite"});
  }
}

TEST(ModelConfig, RejectsFeaturesTheRuntimeLacks) {
  json config = llama31_transformers4();
  config["rope_scaling"]["rope_type"] = "yarn";
  expect_config_error(config, {"'rope_scaling.rope_type'", "'yarn'"});
  config = llama31_transformers4();
  config["attention_bias"] = true;
  expect_config_error(config, {"'attention_bias'"});
  config = llama31_transformers4();
  config["hidden_act"] = "gelu";
  expect_config_error(config, {"'hidden_act'", "'gelu'"});
}

}  // namespace
}  // namespace gemlite
