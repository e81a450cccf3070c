#include "models/model_config.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/error.h"

namespace gemlite {
using nlohmann::json;

namespace {

struct Architecture {
  const char* model_type;
  const char* class_name;
};
// phi3 is Llama's computation with q/k/v and gate/up stored fused (the HF importer splits
// them, split_fused_projections in models/source_model.h).
constexpr Architecture kArchitectures[] = {{"llama", "LlamaForCausalLM"},
                                           {"mistral", "MistralForCausalLM"},
                                           {"qwen2", "Qwen2ForCausalLM"},
                                           {"phi3", "Phi3ForCausalLM"}};
constexpr const char* kSupportedArchitectures = "llama, mistral, qwen2, phi3";

const Architecture* find_architecture(const std::string& name) {
  for (const Architecture& a : kArchitectures)
    if (name == a.model_type || name == a.class_name) return &a;
  return nullptr;
}

// Reads the keys of one JSON object; every failure names the key as it appears in the file
// (`prefix` names the enclosing object, e.g. "rope_scaling.").
class KeyReader {
 public:
  KeyReader(const json& object, std::string where, std::string prefix = "")
      : object_(object), where_(std::move(where)), prefix_(std::move(prefix)) {}

  // JSON null counts as absent: configs write "head_dim": null to mean "derive it".
  bool has(const char* key) const { return object_.contains(key) && !object_[key].is_null(); }

  int required_int(const char* key) const {
    require(key);
    return as_int(key, object_[key]);
  }
  float required_float(const char* key) const {
    return float(typed(key, &json::is_number, "a number").get<double>());
  }
  std::string required_string(const char* key) const {
    return typed(key, &json::is_string, "a string").get<std::string>();
  }
  bool required_bool(const char* key) const {
    return typed(key, &json::is_boolean, "true or false").get<bool>();
  }

  int optional_int(const char* key, int fallback) const {
    return has(key) ? required_int(key) : fallback;
  }
  float optional_float(const char* key, float fallback) const {
    return has(key) ? required_float(key) : fallback;
  }
  std::string optional_string(const char* key, const std::string& fallback) const {
    return has(key) ? required_string(key) : fallback;
  }
  bool optional_bool(const char* key, bool fallback) const {
    return has(key) ? required_bool(key) : fallback;
  }

  // Token ids may be a list (Llama 3 lists several end tokens); the first is the primary one.
  int optional_token_id(const char* key, int fallback) const {
    if (!has(key)) return fallback;
    const json& v = object_[key];
    if (!v.is_array()) return as_int(key, v);
    return v.empty() ? fallback : as_int(key, v[0]);
  }

  const json& object(const char* key) const { return typed(key, &json::is_object, "an object"); }

  [[noreturn]] void bad(const char* key, const std::string& problem) const {
    fail(where_, "'" + prefix_ + key + "' " + problem);
  }

 private:
  void require(const char* key) const {
    if (!has(key)) fail(where_, "missing '" + prefix_ + key + "'");
  }
  const json& typed(const char* key, bool (json::*is_type)() const noexcept, const char* type) const {
    require(key);
    const json& v = object_[key];
    if (!(v.*is_type)()) bad(key, std::string("must be ") + type + ", got " + v.dump());
    return v;
  }
  int as_int(const char* key, const json& v) const {
    if (!v.is_number_integer()) bad(key, "must be an integer, got " + v.dump());
    if (v.get<int64_t>() < INT_MIN || v.get<int64_t>() > INT_MAX)
      bad(key, "is out of range (" + v.dump() + "; at most " + std::to_string(INT_MAX) + ")");
    return v.get<int>();
  }

  const json& object_;
  std::string where_, prefix_;
};

std::string parse_architecture(const json& config, const KeyReader& keys, const std::string& where) {
  std::string name;
  if (keys.has("model_type")) {
    name = keys.required_string("model_type");
  } else if (config.contains("architectures") && config["architectures"].is_array() &&
             !config["architectures"].empty() && config["architectures"][0].is_string()) {
    name = config["architectures"][0].get<std::string>();
  } else {
    fail(where, std::string("missing 'model_type' (supported: ") + kSupportedArchitectures + ")");
  }
  const Architecture* architecture = find_architecture(name);
  if (!architecture)
    fail(where, "unknown architecture '" + name + "' (supported: " + kSupportedArchitectures + ")");
  return architecture->model_type;
}

// One RoPE object (`group`: "rope_parameters" or "rope_scaling") into config: theta where it
// has one, and the scaling.
void parse_rope_group(const KeyReader& keys, const char* group, const std::string& where, ModelConfig* config) {
  if (!keys.has(group)) return;
  const KeyReader rope(keys.object(group), where, std::string(group) + ".");

  config->rope_theta = rope.optional_float("rope_theta", config->rope_theta);
  // transformers 5 keeps Phi-3's partial_rotary_factor here (and writes 1.0 when unset).
  if (rope.optional_float("partial_rotary_factor", 1.0f) != 1.0f)
    rope.bad("partial_rotary_factor", "only 1 (RoPE over the whole head) is supported");
  // transformers before 4.43 spelled rope_type as "type".
  const std::string type = rope.optional_string("rope_type", rope.optional_string("type", "default"));
  if (type == "default") return;
  if (type != "llama3")
    rope.bad("rope_type", "'" + type + "' is not supported (supported: default, llama3)");
  ModelConfig::RopeScaling& scaling = config->rope_scaling;
  scaling.type = "llama3";
  scaling.factor = rope.required_float("factor");
  scaling.low_freq_factor = rope.required_float("low_freq_factor");
  scaling.high_freq_factor = rope.required_float("high_freq_factor");
  scaling.original_max_position = rope.required_int("original_max_position_embeddings");
}

// transformers 5 keeps theta and scaling together in "rope_parameters"; transformers 4 has a
// top-level "rope_theta" and a "rope_scaling" object (null for plain RoPE) beside it.
void parse_rope(const KeyReader& keys, const std::string& where, ModelConfig* config) {
  config->rope_theta = keys.optional_float("rope_theta", 10000.0f);
  if (keys.has("rope_parameters") && keys.has("rope_scaling")) {  // both: they must say the same
    ModelConfig legacy = *config;
    parse_rope_group(keys, "rope_scaling", where, &legacy);
    parse_rope_group(keys, "rope_parameters", where, config);
    const ModelConfig::RopeScaling &a = legacy.rope_scaling, &b = config->rope_scaling;
    const auto rope_type = [](const std::string& t) { return t == "none" ? std::string("default") : t; };
    if (a.type != b.type || a.factor != b.factor || a.low_freq_factor != b.low_freq_factor ||
        a.high_freq_factor != b.high_freq_factor || a.original_max_position != b.original_max_position)
      fail(where, "'rope_parameters' and 'rope_scaling' describe different RoPE scalings (" + rope_type(b.type) +
                      " vs " + rope_type(a.type) + "); remove one");
    return;
  }
  parse_rope_group(keys, keys.has("rope_parameters") ? "rope_parameters" : "rope_scaling", where, config);
}

// The runtime attends over the whole context, which matches sliding-window attention only
// while the context fits in the window, so the usable context ends at the window.
int attention_window(const KeyReader& keys, const std::string& architecture) {
  const bool windowed = architecture == "mistral" || architecture == "phi3" ||
                        (architecture == "qwen2" && keys.optional_bool("use_sliding_window", false));
  if (!windowed) return 0;
  const int window = keys.optional_int("sliding_window", 0);  // null or absent: no window
  if (window < 0) keys.bad("sliding_window", "must be positive or null, got " + std::to_string(window));
  return window;
}

// JSON numbers are doubles; writing a float's shortest decimal keeps 1e-5 from becoming
// 9.999999747378752e-06 in config.json.
double shortest_decimal(float value) {
  char text[32];
  for (int digits = 6; digits < 9; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, double(value));
    if (float(std::strtod(text, nullptr)) == value) return std::strtod(text, nullptr);
  }
  return double(value);
}

}  // namespace

void ModelConfig::validate(const std::string& where) const {
  auto require_positive = [&](int value, const char* key) {
    if (value <= 0)
      fail(where, std::string("'") + key + "' must be positive, got " + std::to_string(value));
  };
  require_positive(dim, "hidden_size");
  require_positive(hidden_dim, "intermediate_size");
  require_positive(n_layers, "num_hidden_layers");
  require_positive(n_heads, "num_attention_heads");
  require_positive(n_kv_heads, "num_key_value_heads");
  require_positive(head_dim, "head_dim");
  require_positive(vocab_size, "vocab_size");
  require_positive(max_seq_len, "max_position_embeddings");
  // Products the shape checks use must not wrap (heads 201326598 x head_dim 64 passed them),
  // and a count of layers in the billions exhausted memory listing its tensors.
  constexpr int64_t kMaxWidth = int64_t(1) << 24, kMaxLayers = 4096;
  if (n_layers > kMaxLayers) fail(where, "'num_hidden_layers' " + std::to_string(n_layers) + " is more than 4096");
  for (const auto& [value, key] : {std::pair<int64_t, const char*>{dim, "hidden_size"},
                                   {hidden_dim, "intermediate_size"},
                                   {int64_t(n_heads) * head_dim, "num_attention_heads x head_dim"},
                                   {int64_t(n_kv_heads) * head_dim, "num_key_value_heads x head_dim"},
                                   {vocab_size, "vocab_size"}})
    if (value > kMaxWidth) fail(where, std::string("'") + key + "' = " + std::to_string(value) + " is more than 2^24");

  if (!find_architecture(architecture))
    fail(where, "unknown architecture '" + architecture + "' (supported: " + kSupportedArchitectures + ")");
  if (n_heads % n_kv_heads != 0)
    fail(where, "'num_attention_heads' (" + std::to_string(n_heads) +
                    ") is not a multiple of 'num_key_value_heads' (" + std::to_string(n_kv_heads) + ")");
  if (head_dim % 2 != 0)  // rotary embeddings turn pairs of dimensions
    fail(where, "'head_dim' (" + std::to_string(head_dim) + ") must be even");
  // Finite too: 1e40 parsed to inf, which the saved config.json then wrote as null.
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) fail(where, "'rope_theta' must be positive and finite");
  if (!(norm_eps > 0) || !std::isfinite(norm_eps)) fail(where, "'rms_norm_eps' must be positive and finite");
  if (rope_scaling.type == "llama3") {
    // low_freq_factor divides the original context (the long wavelength bound): > 0 too.
    if (!(rope_scaling.factor > 0) || !std::isfinite(rope_scaling.factor) || !(rope_scaling.low_freq_factor > 0) ||
        !std::isfinite(rope_scaling.low_freq_factor) || !std::isfinite(rope_scaling.high_freq_factor))
      fail(where, "'rope_scaling' factors must be positive and finite");
    if (!(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor))
      fail(where, "'rope_scaling.high_freq_factor' must exceed 'rope_scaling.low_freq_factor'");
    if (rope_scaling.original_max_position <= 0)
      fail(where, "'rope_scaling.original_max_position_embeddings' must be positive");
  } else if (rope_scaling.type != "none") {
    fail(where, "unsupported rope scaling '" + rope_scaling.type + "' (supported: none, llama3)");
  }
  // A llama/mistral attention bias would include o_proj, which a ModelConfig cannot express.
  if (qkv_bias && architecture != "qwen2") fail(where, "q/k/v biases are only supported for qwen2");
  if (bos_id < 0 || bos_id >= vocab_size)
    fail(where, "'bos_token_id' " + std::to_string(bos_id) + " is outside the vocabulary");
  if (eos_id < 0 || eos_id >= vocab_size)
    fail(where, "'eos_token_id' " + std::to_string(eos_id) + " is outside the vocabulary");
}

ModelConfig parse_hf_config(const json& config, const std::string& where) {
  if (!config.is_object()) fail(where, "not a JSON object");
  const KeyReader keys(config, where);
  ModelConfig c;
  c.architecture = parse_architecture(config, keys, where);
  c.dim = keys.required_int("hidden_size");
  c.hidden_dim = keys.required_int("intermediate_size");
  c.n_layers = keys.required_int("num_hidden_layers");
  c.n_heads = keys.required_int("num_attention_heads");
  c.n_kv_heads = keys.optional_int("num_key_value_heads", c.n_heads);
  c.vocab_size = keys.required_int("vocab_size");
  c.max_seq_len = keys.required_int("max_position_embeddings");
  c.norm_eps = keys.optional_float("rms_norm_eps", 1e-6f);  // transformers' default
  c.tied_embeddings = keys.optional_bool("tie_word_embeddings", false);
  c.bos_id = keys.optional_token_id("bos_token_id", c.bos_id);
  c.eos_id = keys.optional_token_id("eos_token_id", c.eos_id);
  parse_rope(keys, where, &c);

  if (keys.has("head_dim")) {
    c.head_dim = keys.required_int("head_dim");
  } else if (c.n_heads > 0) {
    if (c.dim % c.n_heads != 0)
      fail(where, "'hidden_size' (" + std::to_string(c.dim) + ") is not divisible by " +
                      "'num_attention_heads' (" + std::to_string(c.n_heads) + ") and there is no 'head_dim'");
    c.head_dim = c.dim / c.n_heads;
  }

  const int window = attention_window(keys, c.architecture);
  if (window > 0 && window < c.max_seq_len) c.max_seq_len = window;

  const std::string activation = keys.optional_string("hidden_act", "silu");
  if (activation != "silu")
    keys.bad("hidden_act", "'" + activation + "' is not supported (supported: silu)");
  // Qwen2 always has q/k/v biases and never others; llama's attention_bias adds o_proj too.
  c.qkv_bias = c.architecture == "qwen2";
  if (c.architecture != "qwen2" && keys.optional_bool("attention_bias", false))
    keys.bad("attention_bias", "true is not supported (it adds an o_proj bias)");
  if (keys.optional_bool("mlp_bias", false)) keys.bad("mlp_bias", "true is not supported");
  if (keys.optional_float("partial_rotary_factor", 1.0f) != 1.0f)
    keys.bad("partial_rotary_factor", "only 1 (RoPE over the whole head) is supported");

  c.validate(where);
  return c;
}

json to_hf_config(const ModelConfig& c) {
  c.validate("model config");  // an invalid config here is a bug upstream; never write one
  json config = {
      {"architectures", {find_architecture(c.architecture)->class_name}},
      {"model_type", c.architecture},
      {"hidden_size", c.dim},
      {"intermediate_size", c.hidden_dim},
      {"num_hidden_layers", c.n_layers},
      {"num_attention_heads", c.n_heads},
      {"num_key_value_heads", c.n_kv_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_seq_len},
      {"rms_norm_eps", shortest_decimal(c.norm_eps)},
      {"rope_theta", shortest_decimal(c.rope_theta)},
      {"rope_scaling", nullptr},
      {"tie_word_embeddings", c.tied_embeddings},
      {"hidden_act", "silu"},
      {"bos_token_id", c.bos_id},
      {"eos_token_id", c.eos_id},
  };
  if (c.rope_scaling.type == "llama3")
    config["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", shortest_decimal(c.rope_scaling.factor)},
        {"low_freq_factor", shortest_decimal(c.rope_scaling.low_freq_factor)},
        {"high_freq_factor", shortest_decimal(c.rope_scaling.high_freq_factor)},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position},
    };
  // transformers gives Mistral a 4096-token window unless told otherwise; this model has none.
  if (c.architecture == "mistral") config["sliding_window"] = nullptr;
  return config;
}

}  // namespace gemlite
