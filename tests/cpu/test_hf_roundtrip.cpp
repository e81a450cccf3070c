// A Hugging Face directory round trip: a small random Llama-style model written as
// config.json + model.safetensors, converted by the quantizer (f32), loaded, and run by
// the CPU backend, against a straightforward float64 implementation written here from the
// Hugging Face modeling code's definitions (rotate-half RoPE, GQA, SwiGLU, RMSNorm).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "models/import_hf.h"
#include "models/llama_model.h"
#include "models/packed_checkpoint.h"
#include "models/quantize_model.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/io/safetensors.h"
#include "tests/cpu/program_runner.h"
#include "tests/cpu/source_model_checks.h"
#include "tests/cpu/test_files.h"
#include "tokenizer/tokenizer.h"

namespace gemlite {
namespace {

using Matrix = std::vector<double>;  // row-major

struct TinyModel {
  int dim = 32, hidden = 48, layers = 2, heads = 4, kv_heads = 2, head_dim = 8, vocab = 50;
  double theta = 10000, eps = 1e-5;
  bool tied = true, bias = false, llama3 = false, phi3 = false;
  std::map<std::string, Matrix> w;
  std::map<std::string, std::vector<int64_t>> shape;
};

void add(TinyModel& m, std::mt19937& rng, const std::string& name, std::vector<int64_t> shape, double center) {
  std::normal_distribution<double> normal(center, 0.2);
  int64_t n = 1;
  for (auto d : shape) n *= d;
  Matrix values(n);
  for (auto& v : values) v = double(float(normal(rng)));  // exactly representable in f32
  m.w[name] = values;
  m.shape[name] = shape;
}

TinyModel make_model(bool tied, bool bias, bool llama3, uint32_t seed, int vocab = 50) {
  TinyModel m;
  m.vocab = vocab;
  m.tied = tied;
  m.bias = bias;
  m.llama3 = llama3;
  std::mt19937 rng(seed);
  const int64_t q = m.heads * m.head_dim, kv = m.kv_heads * m.head_dim;
  add(m, rng, "model.embed_tokens.weight", {m.vocab, m.dim}, 0);
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(m, rng, p + "input_layernorm.weight", {m.dim}, 1);
    add(m, rng, p + "post_attention_layernorm.weight", {m.dim}, 1);
    add(m, rng, p + "self_attn.q_proj.weight", {q, m.dim}, 0);
    add(m, rng, p + "self_attn.k_proj.weight", {kv, m.dim}, 0);
    add(m, rng, p + "self_attn.v_proj.weight", {kv, m.dim}, 0);
    if (bias) {
      add(m, rng, p + "self_attn.q_proj.bias", {q}, 0);
      add(m, rng, p + "self_attn.k_proj.bias", {kv}, 0);
      add(m, rng, p + "self_attn.v_proj.bias", {kv}, 0);
    }
    add(m, rng, p + "self_attn.o_proj.weight", {m.dim, q}, 0);
    add(m, rng, p + "mlp.gate_proj.weight", {m.hidden, m.dim}, 0);
    add(m, rng, p + "mlp.up_proj.weight", {m.hidden, m.dim}, 0);
    add(m, rng, p + "mlp.down_proj.weight", {m.dim, m.hidden}, 0);
  }
  add(m, rng, "model.norm.weight", {m.dim}, 1);
  if (!tied) add(m, rng, "lm_head.weight", {m.vocab, m.dim}, 0);
  return m;
}

// Phi-3 stores q, k, v as one qkv_proj and gate, up as one gate_up_proj: their rows
// concatenated in that order.
std::map<std::string, std::vector<std::string>> fused_phi3_tensors(const TinyModel& m) {
  std::map<std::string, std::vector<std::string>> fused;
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    fused[p + "self_attn.qkv_proj.weight"] = {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                                              p + "self_attn.v_proj.weight"};
    fused[p + "mlp.gate_up_proj.weight"] = {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"};
  }
  return fused;
}

void write_hf_directory(const TinyModel& m, const std::string& dir) {
  SafetensorsWriter writer;
  std::map<std::string, std::vector<float>> values_of;  // what each tensor is written from
  for (const auto& [name, values] : m.w) values_of[name] = std::vector<float>(values.begin(), values.end());
  std::map<std::string, std::vector<int64_t>> shapes = m.shape;
  if (m.phi3) {
    for (const auto& [fused, parts] : fused_phi3_tensors(m)) {
      std::vector<float>& rows = values_of[fused];
      int64_t n_rows = 0;
      for (const std::string& part : parts) {
        rows.insert(rows.end(), values_of.at(part).begin(), values_of.at(part).end());
        n_rows += m.shape.at(part)[0];
        values_of.erase(part);
        shapes.erase(part);
      }
      shapes[fused] = {n_rows, m.dim};
    }
  }
  for (const auto& [name, values] : values_of)
    writer.add(name, HostTensor::copy_of(DType::F32, shapes.at(name), values.data()));
  writer.write(dir + "/model.safetensors");
  const char* type = m.phi3 ? "phi3" : m.bias ? "qwen2" : "llama";
  const char* class_name = m.phi3 ? "Phi3ForCausalLM" : m.bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  nlohmann::json config = {
      {"architectures", {class_name}},
      {"model_type", type},
      {"hidden_size", m.dim}, {"intermediate_size", m.hidden}, {"num_hidden_layers", m.layers},
      {"num_attention_heads", m.heads}, {"num_key_value_heads", m.kv_heads}, {"head_dim", m.head_dim},
      {"vocab_size", m.vocab}, {"max_position_embeddings", 64}, {"rms_norm_eps", m.eps},
      {"rope_theta", m.theta}, {"tie_word_embeddings", m.tied}, {"torch_dtype", "float32"}};
  if (m.llama3)
    config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}};
  std::ofstream(dir + "/config.json") << config.dump(2);
}

// ---- float64 reference, after transformers' LlamaForCausalLM / Qwen2ForCausalLM
Matrix linear(const TinyModel& m, const std::string& module, const Matrix& x, int rows) {
  const Matrix& w = m.w.at(module + ".weight");
  const int64_t out = m.shape.at(module + ".weight")[0], in = m.shape.at(module + ".weight")[1];
  Matrix y(rows * out, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = m.w.count(module + ".bias") ? m.w.at(module + ".bias")[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * w[o * in + i];
      y[r * out + o] = sum;
    }
  return y;
}

Matrix rmsnorm(const TinyModel& m, const Matrix& x, const std::string& weight, int rows) {
  Matrix y(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < m.dim; ++i) ss += x[r * m.dim + i] * x[r * m.dim + i];
    const double inv = 1 / std::sqrt(ss / m.dim + m.eps);
    for (int i = 0; i < m.dim; ++i) y[r * m.dim + i] = x[r * m.dim + i] * inv * m.w.at(weight)[i];
  }
  return y;
}

double inv_freq(const TinyModel& m, int i) {
  double f = 1 / std::pow(m.theta, 2.0 * i / m.head_dim);
  if (!m.llama3) return f;
  const double factor = 8, low = 1, high = 4, original = 16, wavelen = 2 * M_PI / f;
  if (wavelen < original / high) return f;
  if (wavelen > original / low) return f / factor;
  const double smooth = (original / wavelen - low) / (high - low);
  return (1 - smooth) * f / factor + smooth * f;
}

void rope(const TinyModel& m, Matrix& x, int heads, int rows) {
  const int half = m.head_dim / 2, width = heads * m.head_dim;
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h) {
      double* v = &x[r * width + h * m.head_dim];
      for (int i = 0; i < half; ++i) {
        const double angle = r * inv_freq(m, i), a = v[i], b = v[i + half];
        v[i] = a * std::cos(angle) - b * std::sin(angle);
        v[i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
}

Matrix reference_logits(const TinyModel& m, const std::vector<int>& ids) {
  const int T = int(ids.size()), q_width = m.heads * m.head_dim, kv_width = m.kv_heads * m.head_dim;
  Matrix x(T * m.dim);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < m.dim; ++i) x[t * m.dim + i] = m.w.at("model.embed_tokens.weight")[ids[t] * m.dim + i];
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Matrix h = rmsnorm(m, x, p + "input_layernorm.weight", T);
    Matrix q = linear(m, p + "self_attn.q_proj", h, T), k = linear(m, p + "self_attn.k_proj", h, T),
           v = linear(m, p + "self_attn.v_proj", h, T);
    rope(m, q, m.heads, T);
    rope(m, k, m.kv_heads, T);
    Matrix attn(T * q_width, 0.0);
    for (int t = 0; t < T; ++t)
      for (int hd = 0; hd < m.heads; ++hd) {
        const int kvh = hd / (m.heads / m.kv_heads);
        std::vector<double> s(t + 1);
        double mx = -1e300, sum = 0;
        for (int p2 = 0; p2 <= t; ++p2) {
          double dot = 0;
          for (int i = 0; i < m.head_dim; ++i)
            dot += q[t * q_width + hd * m.head_dim + i] * k[p2 * kv_width + kvh * m.head_dim + i];
          s[p2] = dot / std::sqrt(double(m.head_dim));
          mx = std::max(mx, s[p2]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int p2 = 0; p2 <= t; ++p2)
          for (int i = 0; i < m.head_dim; ++i)
            attn[t * q_width + hd * m.head_dim + i] += s[p2] / sum * v[p2 * kv_width + kvh * m.head_dim + i];
      }
    Matrix o = linear(m, p + "self_attn.o_proj", attn, T);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    h = rmsnorm(m, x, p + "post_attention_layernorm.weight", T);
    Matrix g = linear(m, p + "mlp.gate_proj", h, T), u = linear(m, p + "mlp.up_proj", h, T);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    Matrix d = linear(m, p + "mlp.down_proj", g, T);
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
  }
  x = rmsnorm(m, x, "model.norm.weight", T);
  TinyModel head = m;
  if (m.tied) {
    head.w["lm_head.weight"] = m.w.at("model.embed_tokens.weight");
    head.shape["lm_head.weight"] = m.shape.at("model.embed_tokens.weight");
  }
  return linear(head, "lm_head", x, T);
}

struct Case { bool tied, bias, llama3, phi3 = false; };

class HfRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(HfRoundTrip, CpuForwardMatchesFloat64Reference) {
  const Case c = GetParam();
  TinyModel m = make_model(c.tied, c.bias, c.llama3, 7 + c.tied + 2 * c.bias);
  m.phi3 = c.phi3;
  const std::string dir = make_temp_dir();
  write_hf_directory(m, dir);

  QuantizeSpec spec;
  spec.format = WeightFormat::parse("f32");
  save_packed_checkpoint(quantize_model(load_hf_directory(dir), spec), dir + "/packed");
  const PackedCheckpoint ckpt = load_packed_checkpoint(dir + "/packed");
  EXPECT_EQ(ckpt.lm_head_tied, c.tied);
  auto backend = make_cpu_backend();
  LlamaModel model(ckpt, *backend);

  const std::vector<int> ids = {1, 17, 3, 42, 5, 9, 33, 2, 49, 0, 12, 21};
  std::vector<float> logits;
  model.forward(ids, 0, /*all_logits=*/true, logits);
  const Matrix expected = reference_logits(m, ids);
  ASSERT_EQ(logits.size(), expected.size());
  double max_abs = 0;
  for (double e : expected) max_abs = std::max(max_abs, std::abs(e));
  // f32 weights and fp32 accumulation over <= 48 terms: errors ~1e-6 of the logits' scale.
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(logits[i], expected[i], 1e-4 * max_abs) << "logit " << i;
}

INSTANTIATE_TEST_SUITE_P(Configs, HfRoundTrip,
                         ::testing::Values(Case{true, false, false},    // Llama, GQA, tied
                                           Case{false, false, true},    // Llama-3 rope scaling
                                           Case{false, true, false},    // Qwen2 q/k/v bias
                                           Case{false, false, false, true}));  // Phi-3: fused q/k/v, gate/up

// A Phi-3 directory imports to exactly the tensors of the same model stored Llama's way
// (the fused rows split back, as views); a fused tensor of the wrong shape is an error
// naming it, and so is Phi-3's long-context rope scaling.
TEST(HfImport, Phi3FusedProjectionsSplitIntoLlamaTensors) {
  TinyModel m = make_model(false, false, false, 11);
  const std::string llama_dir = make_temp_dir(), phi3_dir = make_temp_dir();
  write_hf_directory(m, llama_dir);
  m.phi3 = true;
  write_hf_directory(m, phi3_dir);
  const SourceModel llama = load_hf_directory(llama_dir), phi3 = load_hf_directory(phi3_dir);
  EXPECT_EQ(phi3.config.architecture, "phi3");
  expect_same_tensors(phi3, llama);

  // gate_up_proj of layer 1 written one row short.
  const std::string bad_dir = make_temp_dir();
  {
    SafetensorsWriter writer;
    for (const auto& [name, t] : phi3.tensors) {
      if (name.find(".q_proj") != std::string::npos || name.find(".k_proj") != std::string::npos ||
          name.find(".v_proj") != std::string::npos || name.find(".gate_proj") != std::string::npos ||
          name.find(".up_proj") != std::string::npos)
        continue;
      writer.add(name, t);
    }
    for (const auto& [fused, parts] : fused_phi3_tensors(m)) {
      std::vector<float> rows;
      for (const std::string& part : parts) rows.insert(rows.end(), m.w.at(part).begin(), m.w.at(part).end());
      const int64_t n_rows = int64_t(rows.size()) / m.dim - (fused == "model.layers.1.mlp.gate_up_proj.weight");
      writer.add(fused, HostTensor::copy_of(DType::F32, {n_rows, m.dim}, rows.data()));
    }
    writer.write(bad_dir + "/model.safetensors");
    std::filesystem::copy_file(phi3_dir + "/config.json", bad_dir + "/config.json");
  }
  try {
    load_hf_directory(bad_dir);
    ADD_FAILURE() << "a short gate_up_proj loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.gate_up_proj.weight"), std::string::npos) << e.what();
  }

  nlohmann::json config = nlohmann::json::parse(std::ifstream(phi3_dir + "/config.json"));
  config["rope_scaling"] = {{"type", "longrope"}, {"long_factor", {1.0}}, {"short_factor", {1.0}}};
  std::ofstream(phi3_dir + "/config.json") << config.dump();
  EXPECT_THROW(load_hf_directory(phi3_dir), Error);
}

// Phi-3's chat markers are tokenizer.json "added_tokens" beside a tokenizer.model that lacks
// them: gemlite-quantize puts them into the checkpoint's tokenizer.model at their ids (here
// tok512.model's 512 pieces + <|user|> 512, <|assistant|> 513, <|end|> 515; 514 unused),
// and gemlite-chat then picks the phi3 template and feeds each marker as one token.
TEST(HfImport, Phi3AddedTokensJoinTheCheckpointsTokenizer) {
  TinyModel m = make_model(false, false, false, 13, 520);
  m.phi3 = true;
  const std::string dir = make_temp_dir();
  write_hf_directory(m, dir);
  std::filesystem::copy_file(shared_file("models/stories260K/tok512.model"), dir + "/tokenizer.model");
  const nlohmann::json tokenizer_json = {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"rstrip", true}},  // as Phi-3's </s>
        {{"id", 512}, {"content", "<|user|>"}, {"special", true}, {"rstrip", true}},
        {{"id", 513}, {"content", "<|assistant|>"}, {"special", true}, {"rstrip", true}},
        {{"id", 515}, {"content", "<|end|>"}, {"special", true}, {"rstrip", false}}}}};
  std::ofstream(dir + "/tokenizer.json") << tokenizer_json.dump();
  const SourceModel source = load_hf_directory(dir);
  EXPECT_EQ(source.added_tokens.size(), 4u);
  EXPECT_EQ(source.rstrip_token_ids, (std::vector<int>{0, 512, 513}));

  const std::string out = make_temp_dir() + "/model";
  const ProgramRun quantize = run_program_for_test("gemlite-quantize", dir + " " + out + " f16", true);
  ASSERT_EQ(quantize.exit_code, 0) << quantize.output;
  EXPECT_NE(quantize.output.find("3 added tokens of tokenizer.json"), std::string::npos) << quantize.output;
  const Tokenizer tokenizer = Tokenizer::load(out + "/tokenizer.model");
  // Kept for chat: the markers only (the model's own <unk> is none; kept, chat refused the checkpoint).
  EXPECT_EQ(load_packed_checkpoint(out).rstrip_token_ids, (std::vector<int>{512, 513}));
  EXPECT_EQ(tokenizer.vocab_size(), 516);
  EXPECT_EQ(tokenizer.piece_to_id("<|user|>"), 512);
  EXPECT_EQ(tokenizer.piece_to_id("<|end|>"), 515);
  const std::vector<int> turn = tokenizer.encode("<|user|>\nHi<|end|>\n<|assistant|>\n", false);
  EXPECT_EQ(std::count(turn.begin(), turn.end(), 512) + std::count(turn.begin(), turn.end(), 513) +
                std::count(turn.begin(), turn.end(), 515),
            3);

  const ProgramRun chat = run_program_for_test("gemlite-chat", "-m " + out + " --device cpu --temp 0 -n 4", true, "Hi\n");
  EXPECT_EQ(chat.exit_code, 0) << chat.output;
  EXPECT_NE(chat.output.find("phi3"), std::string::npos) << chat.output;  // the template it chose

  // An added token named twice is an error naming tokenizer.json.
  nlohmann::json twice = tokenizer_json;
  twice["added_tokens"].push_back({{"id", 515}, {"content", "<|other|>"}});
  std::ofstream(dir + "/tokenizer.json") << twice.dump();
  const ProgramRun refused = run_program_for_test("gemlite-quantize", dir + " " + make_temp_dir() + "/m f16", true);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.output.find("tokenizer.json"), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace gemlite
