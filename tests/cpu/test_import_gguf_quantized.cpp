// GGUF files with Q8_0 / Q4_0 tensors, as llama.cpp's quantize writes them (blocks of 32
// along a row: fp16 scale d, then int8 codes, or 16 bytes of nibbles with weight j < 16 in
// the low nibble of byte j and 16 + j in its high nibble), made here from stories260K's
// real weights by an encoder written from that description. The importer must return each
// weight within its block's rounding of the original (|d| / 2 for Q8_0, |d| for Q4_0,
// whose codes clamp at 15), q/k rows in rotate-half order, and the model must keep its
// perplexity (Q8_0 within 0.5 %).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "models/ggml_blocks.h"
#include "models/import_gguf.h"
#include "models/import_llama2c.h"
#include "models/llama_weights.h"
#include "models/pack_ggml_codes.h"
#include "models/packed_checkpoint.h"
#include "models/quantize_model.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "tests/cpu/program_runner.h"
#include "tests/cpu/source_model_checks.h"
#include "tests/cpu/test_files.h"

namespace gemlite {
namespace {

const std::string kBin = shared_file("models/stories260K/stories260K.bin");

enum class Quant { Q8_0 = 8, Q4_0 = 2 };

// One block of 32 weights -> its bytes, and the scale d it used.
float encode_block(const float* x, Quant quant, std::string* out) {
  float amax = 0, signed_max = 0;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), signed_max = x[j];
  const float d = quant == Quant::Q8_0 ? amax / 127 : signed_max / -8;
  const uint16_t d_bits = float_to_half(d);
  const float stored_d = half_to_float(d_bits), inverse = stored_d != 0 ? 1 / stored_d : 0;
  out->append(reinterpret_cast<const char*>(&d_bits), 2);
  if (quant == Quant::Q8_0) {
    for (int j = 0; j < 32; ++j) out->push_back(char(int8_t(std::lround(std::clamp(x[j] * inverse, -127.f, 127.f)))));
  } else {
    for (int j = 0; j < 16; ++j) {
      const int low = std::min(15, int(x[j] * inverse + 8.5f)), high = std::min(15, int(x[16 + j] * inverse + 8.5f));
      out->push_back(char(std::max(0, low) | std::max(0, high) << 4));
    }
  }
  return stored_d;
}

// Meta's interleaved RoPE row order (GGUF's for llama) from rotate-half order.
std::vector<float> rotate_half_to_interleaved(const HostTensor& t, int head_dim) {
  const int64_t rows = t.shape[0], cols = t.shape[1], half = head_dim / 2;
  std::vector<float> out(size_t(rows * cols));
  for (int64_t h = 0; h < rows; h += head_dim)
    for (int64_t i = 0; i < half; ++i) {
      std::memcpy(&out[size_t((h + 2 * i) * cols)], t.as<float>() + (h + i) * cols, size_t(cols) * 4);
      std::memcpy(&out[size_t((h + 2 * i + 1) * cols)], t.as<float>() + (h + half + i) * cols, size_t(cols) * 4);
    }
  return out;
}

struct GgufWriter {
  std::string header, infos, data;
  uint64_t n_values = 0, n_tensors = 0;
  void string(std::string& to, const std::string& s) {
    const uint64_t n = s.size();
    to.append(reinterpret_cast<const char*>(&n), 8);
    to += s;
  }
  template <typename T>
  void raw(std::string& to, T v) { to.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void key_u32(const std::string& key, uint32_t v) { string(header, key), raw(header, uint32_t(4)), raw(header, v), ++n_values; }
  void key_f32(const std::string& key, float v) { string(header, key), raw(header, uint32_t(6)), raw(header, v), ++n_values; }
  void key_str(const std::string& key, const std::string& v) {
    string(header, key), raw(header, uint32_t(8)), string(header, v), ++n_values;
  }
  // general.architecture and the model's shape under "<arch>." as llama.cpp writes them.
  void shape_keys(const std::string& arch, int dim, int hidden, int layers, int heads, int kv_heads, int context,
                  float eps) {
    key_str("general.architecture", arch);
    key_u32(arch + ".embedding_length", uint32_t(dim));
    key_u32(arch + ".feed_forward_length", uint32_t(hidden));
    key_u32(arch + ".block_count", uint32_t(layers));
    key_u32(arch + ".attention.head_count", uint32_t(heads));
    key_u32(arch + ".attention.head_count_kv", uint32_t(kv_heads));
    key_u32(arch + ".context_length", uint32_t(context));
    key_f32(arch + ".attention.layer_norm_rms_epsilon", eps);
  }
  // shape row-major [rows, cols] (or [cols]); GGUF lists it innermost first.
  void tensor(const std::string& name, const std::vector<int64_t>& shape, uint32_t type, const std::string& bytes) {
    string(infos, name);
    raw(infos, uint32_t(shape.size()));
    for (auto d = shape.rbegin(); d != shape.rend(); ++d) raw(infos, uint64_t(*d));
    raw(infos, type);
    while (data.size() % 32) data.push_back(0);
    raw(infos, uint64_t(data.size()));
    data += bytes;
    ++n_tensors;
  }
  void save(const std::string& path) {
    std::string file = "GGUF";
    raw(file, uint32_t(3));
    raw(file, n_tensors);
    raw(file, n_values);
    file += header + infos;
    while (file.size() % 32) file.push_back(0);
    std::ofstream(path, std::ios::binary) << file << data;
  }
};

// stories260K as a GGUF whose 2-D weights are `quant` blocks (norms, and ffn_down whose
// rows of 172 are no whole blocks, stay F32, as llama.cpp keeps them); the scales used,
// per GGUF tensor name, for the error bounds.
std::string write_quantized_gguf(Quant quant, std::map<std::string, std::vector<float>>* scales) {
  const SourceModel source = load_llama2c(kBin);
  const ModelConfig& c = source.config;
  GgufWriter w;
  w.shape_keys("llama", c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.max_seq_len, c.norm_eps);
  const auto add = [&](const std::string& gguf_name, const std::string& hf_name, bool interleave) {
    const HostTensor& t = source.tensors.at(hf_name);
    std::vector<float> values(t.as<float>(), t.as<float>() + t.numel());
    if (interleave) values = rotate_half_to_interleaved(t, c.head_dim);
    if (t.shape.size() == 1 || t.shape[1] % 32 != 0) {  // llama.cpp keeps those unquantized too
      w.tensor(gguf_name, t.shape, 0, std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
      return;
    }
    std::string bytes;
    std::vector<float>& d = (*scales)[gguf_name];
    for (size_t b = 0; b < values.size(); b += 32) d.push_back(encode_block(&values[b], quant, &bytes));
    w.tensor(gguf_name, t.shape, uint32_t(quant), bytes);
  };
  add("token_embd.weight", kEmbeddingName, false);
  add("output_norm.weight", kFinalNormName, false);
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerTensorNames l = layer_tensor_names(i);
    const std::string b = "blk." + std::to_string(i) + ".";
    add(b + "attn_norm.weight", l.attn_norm, false);
    add(b + "ffn_norm.weight", l.ffn_norm, false);
    add(b + "attn_q.weight", l.q + ".weight", true);
    add(b + "attn_k.weight", l.k + ".weight", true);
    add(b + "attn_v.weight", l.v + ".weight", false);
    add(b + "attn_output.weight", l.o + ".weight", false);
    add(b + "ffn_gate.weight", l.gate + ".weight", false);
    add(b + "ffn_up.weight", l.up + ".weight", false);
    add(b + "ffn_down.weight", l.down + ".weight", false);
  }
  const std::string path = make_temp_dir() + (quant == Quant::Q8_0 ? "/q8_0.gguf" : "/q4_0.gguf");
  w.save(path);
  return path;
}

void expect_weights_within_block_rounding(Quant quant) {
  std::map<std::string, std::vector<float>> scales;
  const SourceModel imported = load_gguf(write_quantized_gguf(quant, &scales));
  const SourceModel original = load_llama2c(kBin);
  const float bound = quant == Quant::Q8_0 ? 0.5f : 1.0f;  // in units of |d|
  for (int i = 0; i < original.config.n_layers; ++i) {
    const LayerTensorNames l = layer_tensor_names(i);
    // q in rotate-half order again; its scales were taken on the interleaved rows, so
    // compare block by block in that order through the importer's own row mapping.
    for (const auto& [gguf, hf] : {std::pair{"attn_v", l.v}, std::pair{"ffn_gate", l.gate}, std::pair{"attn_q", l.q}}) {
      const HostTensor got = imported.tensor(hf + ".weight");
      const HostTensor& want = original.tensors.at(hf + ".weight");
      ASSERT_EQ(got.dtype, DType::F32);
      ASSERT_EQ(got.shape, want.shape);
      const std::vector<float>& d = scales.at("blk." + std::to_string(i) + "." + gguf + ".weight");
      float worst = 0;
      for (int64_t k = 0; k < want.numel(); ++k) {
        const float err = std::fabs(got.as<float>()[k] - want.as<float>()[k]);
        worst = std::max(worst, err);
        // attn_q's rows moved; bound by the largest scale of the tensor there.
        const float scale = std::string(gguf) == "attn_q" ? *std::max_element(d.begin(), d.end(), [](float a, float b) {
          return std::fabs(a) < std::fabs(b);
        }) : d[size_t(k / 32)];
        ASSERT_LE(err, bound * std::fabs(scale) * 1.001f + 1e-7f) << hf << " weight " << k;
      }
      EXPECT_GT(worst, 0.0f) << hf << ": a quantized weight should not come back exact everywhere";
    }
  }
}

TEST(ImportGgufQuantized, Q8_0WeightsComeBackWithinHalfAStep) { expect_weights_within_block_rounding(Quant::Q8_0); }
TEST(ImportGgufQuantized, Q4_0WeightsComeBackWithinAStep) { expect_weights_within_block_rounding(Quant::Q4_0); }

// gemlite-quantize `source` to `format`, then gemlite-perplexity of the TinyStories sample
// on the CPU (NaN when either fails, with a test failure).
double perplexity_of(const std::string& source, const std::string& tokenizer_flag, const std::string& format = "f32",
                     const std::string& windows = "-c 128 --chunks 8") {
  const std::string out = make_temp_dir() + "/model";
  const ProgramRun quantize =
      run_program_for_test("gemlite-quantize", source + " " + out + " " + format + tokenizer_flag, true);
  EXPECT_EQ(quantize.exit_code, 0) << quantize.output;
  const ProgramRun run = run_program_for_test(
      "gemlite-perplexity",
      "--device cpu -m " + out + " -f " + shared_file("data/tinystories/tinystories_sample.txt") + " " + windows, false);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const size_t at = run.output.find("PPL = ");
  return at == std::string::npos ? NAN : std::stod(run.output.substr(at + 6));
}

TEST(ImportGgufQuantized, Q8_0KeepsThePerplexity) {
  std::map<std::string, std::vector<float>> scales;
  const std::string tokenizer = " --tokenizer " + shared_file("models/stories260K/tok512.model");
  const double f32 = perplexity_of(kBin, tokenizer);
  const double q8_0 = perplexity_of(write_quantized_gguf(Quant::Q8_0, &scales), tokenizer);
  const double q4_0 = perplexity_of(write_quantized_gguf(Quant::Q4_0, &scales), tokenizer);
  EXPECT_NEAR(q8_0, f32, 0.005 * f32);
  EXPECT_GT(q4_0, q8_0);
  std::cout << "[gguf] stories260K PPL: f32 " << f32 << ", from Q8_0 " << q8_0 << ", from Q4_0 " << q4_0 << "\n";
}

// qNg32 packs a GGUF's affine blocks code for code (models/pack_ggml_codes.h): from Q4_0
// and Q8_0 the fp16 scale is d itself and the zero 8 or 128, so q4g32 / q8g32 decode to
// exactly the GGUF's weights (q/k rows moved to rotate-half order with their codes); a
// group size that is not the file's (q4g64) quantizes the decoded floats again instead.
void expect_packed_equals_imported(const PackedCheckpoint& packed, const SourceModel& imported, bool exact) {
  for (int i = 0; i < imported.config.n_layers; ++i) {
    const LayerTensorNames l = layer_tensor_names(i);
    const PackedLayer& layer = packed.layers[size_t(i)];
    // Every module the file holds as blocks (ffn_down, rows of 172, it keeps as F32).
    const std::vector<std::pair<std::string, const PackedWeight*>> modules = {
        {l.q, &layer.q}, {l.k, &layer.k}, {l.v, &layer.v}, {l.o, &layer.o}, {l.gate, &layer.gate}, {l.up, &layer.up}};
    for (const auto& [name, weight] : modules) {
      const HostTensor want = imported.tensor(name + ".weight");
      std::vector<float> row(static_cast<size_t>(weight->cols));
      int64_t differ = 0;
      for (int64_t n = 0; n < weight->rows; ++n) {
        dequantize_row(*weight, n, row.data());
        const float* w = want.as<float>() + n * weight->cols;
        for (int64_t k = 0; k < weight->cols; ++k) differ += row[size_t(k)] != w[k];
      }
      if (exact)
        EXPECT_EQ(differ, 0) << name << " (" << weight->format.name() << ")";
      else
        EXPECT_GT(differ, 0) << name << " (" << weight->format.name() << "): expected a second rounding";
    }
  }
}

TEST(ImportGgufQuantized, Q4_0AndQ8_0PackAsQ4g32AndQ8g32CodeForCode) {
  std::map<std::string, std::vector<float>> scales;
  for (const auto& [quant, format] : {std::pair{Quant::Q4_0, "q4g32"}, std::pair{Quant::Q8_0, "q8g32"}}) {
    SCOPED_TRACE(format);
    const SourceModel imported = load_gguf(write_quantized_gguf(quant, &scales));
    EXPECT_FALSE(imported.block_sources.empty());
    QuantizeSpec spec;
    spec.format = WeightFormat::parse(format);
    expect_packed_equals_imported(quantize_model(imported, spec), imported, true);
    spec.format = WeightFormat::parse(quant == Quant::Q4_0 ? "q4g64" : "q8g64");
    expect_packed_equals_imported(quantize_model(imported, spec), imported, false);
  }
  // The same model through the programs: q4g32 from the Q4_0 codes keeps the Q4_0 file's
  // perplexity (its f32 conversion; ffn_down, whose rows of 172 are no whole blocks and
  // stayed F32 in the file, kept f32 here too, and the embedding stored as fp16); q4g64
  // quantizes a second time.
  const std::string tokenizer = " --tokenizer " + shared_file("models/stories260K/tok512.model");
  const std::string gguf = write_quantized_gguf(Quant::Q4_0, &scales);
  const double as_f32 = perplexity_of(gguf, tokenizer),
               as_q4g32 = perplexity_of(gguf, tokenizer, "q4g32 --override mlp.down_proj=f32"),
               as_q4g64 = perplexity_of(gguf, tokenizer, "q4g64 --override mlp.down_proj=f32");
  EXPECT_NEAR(as_q4g32, as_f32, 1e-3 * as_f32);
  // gemlite-quantize says which modules kept the file's codes: all 36 linear modules but
  // the 5 ffn_down, which the file holds as F32.
  const ProgramRun quantize =
      run_program_for_test("gemlite-quantize", gguf + " " + make_temp_dir() + "/model q4g32" + tokenizer, true);
  ASSERT_EQ(quantize.exit_code, 0) << quantize.output;
  EXPECT_NE(quantize.output.find("31 of 36 linear modules packed from"), std::string::npos) << quantize.output;
  EXPECT_GT(as_q4g64, as_q4g32);
  std::cout << "[gguf] stories260K from Q4_0: PPL as f32 " << as_f32 << ", q4g32 from the codes " << as_q4g32
            << ", q4g64 requantized " << as_q4g64 << "\n";
}

// stories260K as llama.cpp's convert_hf_to_gguf.py writes a Phi-3 (arch "phi3"): q/k/v in
// one attn_qkv and [gate; up] in one ffn_up, rows in Hugging Face's rotate-half order, F32.
// `extra` adds a tensor (e.g. rope factors); `window` > 0 writes phi3.attention.sliding_window;
// `rope_dims` > 0 replaces head_dim as phi3.rope.dimension_count.
std::string write_phi3_gguf(const std::string& extra = "", int window = 0, int rope_dims = 0) {
  const SourceModel source = load_llama2c(kBin);
  const ModelConfig& c = source.config;
  GgufWriter w;
  w.shape_keys("phi3", c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.max_seq_len, c.norm_eps);
  w.key_u32("phi3.rope.dimension_count", rope_dims > 0 ? rope_dims : c.head_dim);
  if (window > 0) w.key_u32("phi3.attention.sliding_window", uint32_t(window));
  const auto bytes_of = [&](const std::vector<std::string>& names) {
    std::string bytes;
    for (const std::string& name : names) {
      const HostTensor& t = source.tensors.at(name);
      bytes.append(reinterpret_cast<const char*>(t.data), t.nbytes());
    }
    return bytes;
  };
  const auto add = [&](const std::string& gguf_name, const std::vector<std::string>& hf_names) {
    int64_t rows = 0;
    for (const std::string& name : hf_names) rows += source.tensors.at(name).shape[0];
    std::vector<int64_t> shape = source.tensors.at(hf_names[0]).shape;
    shape[0] = rows;
    w.tensor(gguf_name, shape, 0, bytes_of(hf_names));
  };
  add("token_embd.weight", {kEmbeddingName});
  add("output_norm.weight", {kFinalNormName});
  if (source.tensors.count(std::string(kLmHeadModule) + ".weight"))
    add("output.weight", {std::string(kLmHeadModule) + ".weight"});
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerTensorNames l = layer_tensor_names(i);
    const std::string b = "blk." + std::to_string(i) + ".";
    add(b + "attn_norm.weight", {l.attn_norm});
    add(b + "ffn_norm.weight", {l.ffn_norm});
    add(b + "attn_qkv.weight", {l.q + ".weight", l.k + ".weight", l.v + ".weight"});
    add(b + "attn_output.weight", {l.o + ".weight"});
    add(b + "ffn_up.weight", {l.gate + ".weight", l.up + ".weight"});
    add(b + "ffn_down.weight", {l.down + ".weight"});
  }
  if (!extra.empty()) {
    const std::vector<float> ones(size_t(c.head_dim / 2), 1.0f);
    w.tensor(extra, {c.head_dim / 2}, 0, std::string(reinterpret_cast<const char*>(ones.data()), ones.size() * 4));
  }
  const std::string path = make_temp_dir() + "/phi3.gguf";
  w.save(path);
  return path;
}

TEST(ImportGgufPhi3, FusedTensorsSplitIntoTheSameModel) {
  const SourceModel phi3 = load_gguf(write_phi3_gguf()), original = load_llama2c(kBin);
  EXPECT_EQ(phi3.config.architecture, "phi3");
  EXPECT_EQ(phi3.config.max_seq_len, original.config.max_seq_len);
  expect_same_tensors(phi3, original);
  EXPECT_EQ(load_gguf(write_phi3_gguf("", 100)).config.max_seq_len, 100);  // the sliding window
  for (const char* factors : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    try {
      load_gguf(write_phi3_gguf(factors));
      ADD_FAILURE() << "Phi-3 long-context rope factors were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rope_factors"), std::string::npos) << e.what();
    }
  }
  try {
    load_gguf(write_phi3_gguf("", 0, 4));  // RoPE over 4 of 8 dimensions
    ADD_FAILURE() << "partial RoPE was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope.dimension_count"), std::string::npos) << e.what();
  }
}

// A Llama of llama.cpp's K-quant mix (Q4_K projections, Q6_K ffn_down and output, as in
// Q4_K_M; F32 norms), 256 wide so rows are whole 256-weight super-blocks, with random
// blocks (random codes and packed scales, N(0, 0.002) fp16 super-block scales: weights of
// at most ~2, so the activations stay finite). The import
// must place every block where the file says (each tensor equals its blocks decoded one
// by one, q/k aside, whose rows move), and the programs must run the model end to end.
struct KQuantModel {
  std::string path;
  std::map<std::string, std::vector<float>> decoded;  // GGUF name -> its blocks decoded in file order
};
KQuantModel write_k_quant_gguf() {
  constexpr int kDim = 256, kHidden = 512, kVocab = 512, kQ4K = 12, kQ6K = 14;
  GgufWriter w;
  w.shape_keys("llama", kDim, kHidden, 2, 4, 2, 256, 1e-5f);
  std::mt19937 rng(41);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 0.002f);
  KQuantModel model;
  const auto quantized = [&](const std::string& name, int64_t rows, int64_t cols, uint32_t id) {
    const GgmlType* type = ggml_type(id);
    std::string bytes;
    std::vector<float>& decoded = model.decoded[name];
    decoded.resize(size_t(rows * cols));
    for (int64_t b = 0; b < rows * cols / type->block_elements; ++b) {
      std::string block(size_t(type->block_bytes), '\0');
      for (char& c : block) c = char(byte(rng));
      // The fp16 super-block scales: d, dmin first in Q4_K, d last in Q6_K.
      for (size_t at : id == kQ4K ? std::vector<size_t>{0, 2} : std::vector<size_t>{208}) {
        const uint16_t bits = float_to_half(normal(rng));
        std::memcpy(&block[at], &bits, 2);
      }
      type->dequantize_block(reinterpret_cast<const uint8_t*>(block.data()),
                             &decoded[size_t(b * type->block_elements)]);
      bytes += block;
    }
    w.tensor(name, {rows, cols}, id, bytes);
  };
  const std::vector<float> ones(kDim, 1.0f);
  const std::string norm(reinterpret_cast<const char*>(ones.data()), ones.size() * 4);
  quantized("token_embd.weight", kVocab, kDim, kQ4K);
  w.tensor("output_norm.weight", {kDim}, 0, norm);
  quantized("output.weight", kVocab, kDim, kQ6K);
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    w.tensor(b + "attn_norm.weight", {kDim}, 0, norm);
    w.tensor(b + "ffn_norm.weight", {kDim}, 0, norm);
    quantized(b + "attn_q.weight", kDim, kDim, kQ4K);
    quantized(b + "attn_k.weight", kDim / 2, kDim, kQ4K);
    quantized(b + "attn_v.weight", kDim / 2, kDim, kQ4K);
    quantized(b + "attn_output.weight", kDim, kDim, kQ4K);
    quantized(b + "ffn_gate.weight", kHidden, kDim, kQ4K);
    quantized(b + "ffn_up.weight", kHidden, kDim, kQ4K);
    quantized(b + "ffn_down.weight", kDim, kHidden, kQ6K);
  }
  model.path = make_temp_dir() + "/k-quants.gguf";
  w.save(model.path);
  return model;
}

TEST(ImportGgufQuantized, KQuantTensorsLandWhereTheFileSays) {
  const KQuantModel model = write_k_quant_gguf();
  const SourceModel imported = load_gguf(model.path);
  // The blocks stay the file's bytes (decoded on demand), not a float copy of the model.
  const std::string up = layer_tensor_names(0).up + ".weight";
  EXPECT_EQ(imported.tensors.count(up), 0u);
  ASSERT_EQ(imported.block_sources.count(up), 1u);
  EXPECT_EQ(imported.block_sources.at(up).blocks.shape, (std::vector<int64_t>{512, 144}));
  EXPECT_EQ(imported.shape_of(up), (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(imported.config.dim, 256);
  EXPECT_EQ(imported.config.hidden_dim, 512);
  const LayerTensorNames l = layer_tensor_names(1);
  for (const auto& [gguf, hf] : {std::pair<std::string, std::string>{"token_embd.weight", kEmbeddingName},
                                 {"output.weight", std::string(kLmHeadModule) + ".weight"},
                                 {"blk.1.attn_v.weight", l.v + ".weight"},
                                 {"blk.1.ffn_up.weight", l.up + ".weight"},
                                 {"blk.1.ffn_down.weight", l.down + ".weight"}}) {
    SCOPED_TRACE(gguf);
    const HostTensor t = imported.tensor(hf);
    ASSERT_EQ(t.dtype, DType::F32);
    const std::vector<float>& want = model.decoded.at(gguf);
    ASSERT_EQ(size_t(t.numel()), want.size());
    EXPECT_EQ(std::vector<float>(t.as<float>(), t.as<float>() + t.numel()), want);
  }
}

// Q4_K's groups of 32 (scale s = d * sc, offset o = -dmin * m) packed as q4g32: s and the
// zero -o / s round to fp16 (d * sc has up to 17 significant bits), so a weight moves by at
// most 2^-11 (|q s| + |o|) <= 2^-11 (15 |s| + |o|), where quantizing the floats again
// would be off by up to half a step, 1/30 of the group's range; Q6_K tensors (groups of
// 16) take that path.
TEST(ImportGgufQuantized, Q4KPacksAsQ4g32WithinFp16Rounding) {
  const KQuantModel model = write_k_quant_gguf();
  const SourceModel imported = load_gguf(model.path);
  QuantizeSpec spec;
  spec.format = WeightFormat::parse("q4g32");
  const PackedCheckpoint packed = quantize_model(imported, spec);
  const LayerTensorNames l = layer_tensor_names(1);
  const std::vector<float>& want = model.decoded.at("blk.1.ffn_up.weight");  // [512, 256], Q4_K
  const PackedWeight& up = packed.layers[1].up;
  const BlockSource& blocks = imported.block_sources.at(l.up + ".weight");  // [512 rows, 144 bytes]
  ASSERT_EQ(blocks.blocks.shape, (std::vector<int64_t>{512, 144}));
  std::vector<float> row(static_cast<size_t>(up.cols));
  uint8_t codes[256];
  float scale[8], offset[8];
  double worst = 0;
  for (int64_t n = 0; n < up.rows; ++n) {
    dequantize_row(up, n, row.data());
    ggml_type(12)->affine_groups(blocks.blocks.data + n * 144, codes, scale, offset);
    for (int64_t k = 0; k < up.cols; ++k) {
      const double bound = std::ldexp(1.0, -11) * (15 * std::fabs(scale[k / 32]) + std::fabs(offset[k / 32]));
      const double err = std::fabs(row[size_t(k)] - want[size_t(n * up.cols + k)]);
      worst = std::max(worst, err / bound);
      ASSERT_LE(err, 1.01 * bound + 1e-12) << "row " << n << " weight " << k;
    }
  }
  std::cout << "[gguf] Q4_K -> q4g32: worst error " << worst << " of the fp16 bound\n";
  // Q6_K's groups of 16 have no qNg32 counterpart: its floats are quantized again.
  EXPECT_FALSE(pack_qn_from_ggml_codes(imported.block_sources.at(l.down + ".weight"), spec.format).has_value());
}

// FORMAT gguf keeps a K-quant mix: the Q4_K tensors become q4g32 from their codes, the
// Q6_K ones (ffn_down, output) q6g32; a source without quantized tensors is refused.
TEST(ImportGgufQuantized, FormatGgufKeepsTheFilesMix) {
  const KQuantModel model = write_k_quant_gguf();
  const std::string out = make_temp_dir() + "/model";
  const std::string tokenizer = " --tokenizer " + shared_file("models/stories260K/tok512.model");
  const ProgramRun quantize = run_program_for_test("gemlite-quantize", model.path + " " + out + " gguf" + tokenizer, true);
  ASSERT_EQ(quantize.exit_code, 0) << quantize.output;
  // 2 layers x 7 + lm_head; q, k, v, o, gate, up of each layer are Q4_K.
  EXPECT_NE(quantize.output.find("12 of 15 linear modules packed from"), std::string::npos) << quantize.output;
  const PackedCheckpoint packed = load_packed_checkpoint(out);
  for (const PackedLayer& layer : packed.layers) {
    EXPECT_EQ(layer.q.format.name(), "q4g32");
    EXPECT_EQ(layer.up.format.name(), "q4g32");
    EXPECT_EQ(layer.down.format.name(), "q6g32");
  }
  EXPECT_EQ(packed.lm_head.format.name(), "q6g32");
  EXPECT_EQ(packed.format_summary(), "q4g32+q6g32");
  const ProgramRun bench = run_program_for_test("gemlite-bench", "--device cpu -m " + out + " -p 4 -n 2 -r 1", false);
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find(out + " q4g32+q6g32 |"), std::string::npos) << bench.output;

  const ProgramRun refused = run_program_for_test(
      "gemlite-quantize", kBin + " " + make_temp_dir() + "/model gguf" + tokenizer, true);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.output.find("no quantized tensors"), std::string::npos) << refused.output;
}

TEST(ImportGgufQuantized, KQuantModelQuantizesAndRuns) {
  const KQuantModel model = write_k_quant_gguf();
  const double ppl = perplexity_of(model.path, " --tokenizer " + shared_file("models/stories260K/tok512.model"),
                                   "q4g64", "-c 64 --chunks 2");
  EXPECT_TRUE(std::isfinite(ppl) && ppl > 1) << ppl;  // random weights: finite, nothing more
}

}  // namespace
}  // namespace gemlite
