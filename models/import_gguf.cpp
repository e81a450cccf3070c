#include "models/import_gguf.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

#include "models/ggml_blocks.h"
#include "models/llama_weights.h"
#include "runtime/error.h"
#include "runtime/io/mapped_file.h"

namespace gemlite {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint64_t kDefaultAlignment = 32;

// GGUF metadata value types.
enum ValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7,
  kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

// A bounds-checked little-endian cursor over the mapped file.
class Cursor {
 public:
  Cursor(const MappedFile& file, std::string path) : data_(file.data()), size_(file.size()), path_(std::move(path)) {}

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, data_ + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string read_string(const char* what) {
    const uint64_t length = read<uint64_t>(what);
    need(length, what);
    std::string text(reinterpret_cast<const char*>(data_ + at_), size_t(length));
    at_ += size_t(length);
    return text;
  }
  void skip(uint64_t bytes, const char* what) {
    need(bytes, what);
    at_ += size_t(bytes);
  }
  size_t at() const { return at_; }

 private:
  void need(uint64_t bytes, const char* what) const {
    if (bytes > size_ - at_)  // a cut file, or a corrupt length field asking for more than there is
      fail(path_, "truncated or corrupt: " + std::string(what) + " at byte " + std::to_string(at_) + " needs " +
                      std::to_string(bytes) + " bytes, " + std::to_string(size_ - at_) + " are left");
  }
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
  std::string path_;
};

// One metadata value: scalars as integer/real/text/flag; arrays only by type and length.
struct Value {
  uint32_t type = kUint8;
  int64_t integer = 0;
  double real = 0;
  std::string text;
  uint32_t array_type = 0;
  uint64_t array_length = 0;
  std::vector<std::string> strings;  // an array of strings
  std::vector<double> numbers;       // an array of numbers
};

double read_number(Cursor& cursor, uint32_t type) {
  switch (type) {
    case kUint8: case kBool: return cursor.read<uint8_t>("an array's values");
    case kInt8: return cursor.read<int8_t>("an array's values");
    case kUint16: return cursor.read<uint16_t>("an array's values");
    case kInt16: return cursor.read<int16_t>("an array's values");
    case kUint32: return cursor.read<uint32_t>("an array's values");
    case kInt32: return cursor.read<int32_t>("an array's values");
    case kFloat32: return cursor.read<float>("an array's values");
    case kUint64: return double(cursor.read<uint64_t>("an array's values"));
    case kInt64: return double(cursor.read<int64_t>("an array's values"));
    default: return cursor.read<double>("an array's values");
  }
}

size_t scalar_bytes(uint32_t type, const std::string& path, const std::string& key) {
  switch (type) {
    case kUint8: case kInt8: case kBool: return 1;
    case kUint16: case kInt16: return 2;
    case kUint32: case kInt32: case kFloat32: return 4;
    case kUint64: case kInt64: case kFloat64: return 8;
    default: fail(path, "metadata '" + key + "' has unknown value type " + std::to_string(type));
  }
}

// Arrays are kept only for the tokenizer's keys (the vocabulary); others are skipped.
Value read_value(Cursor& cursor, uint32_t type, const std::string& path, const std::string& key) {
  const bool keep = key.rfind("tokenizer.ggml.", 0) == 0;
  Value v;
  v.type = type;
  switch (type) {
    case kUint8: v.integer = cursor.read<uint8_t>("a metadata value"); break;
    case kInt8: v.integer = cursor.read<int8_t>("a metadata value"); break;
    case kBool: v.integer = cursor.read<uint8_t>("a metadata value"); break;
    case kUint16: v.integer = cursor.read<uint16_t>("a metadata value"); break;
    case kInt16: v.integer = cursor.read<int16_t>("a metadata value"); break;
    case kUint32: v.integer = cursor.read<uint32_t>("a metadata value"); break;
    case kInt32: v.integer = cursor.read<int32_t>("a metadata value"); break;
    case kUint64: v.integer = int64_t(cursor.read<uint64_t>("a metadata value")); break;
    case kInt64: v.integer = cursor.read<int64_t>("a metadata value"); break;
    case kFloat32: v.real = cursor.read<float>("a metadata value"); break;
    case kFloat64: v.real = cursor.read<double>("a metadata value"); break;
    case kString: v.text = cursor.read_string("a metadata string"); break;
    case kArray: {
      v.array_type = cursor.read<uint32_t>("an array's type");
      v.array_length = cursor.read<uint64_t>("an array's length");
      if (v.array_length > (uint64_t(1) << 28)) fail(path, "metadata '" + key + "': absurd array length");
      if (v.array_type == kString) {
        for (uint64_t i = 0; i < v.array_length; ++i) {
          std::string text = cursor.read_string("an array's strings");
          if (keep) v.strings.push_back(std::move(text));
        }
      } else if (v.array_type == kArray) {
        fail(path, "metadata '" + key + "' is an array of arrays (not supported)");
      } else if (keep) {
        scalar_bytes(v.array_type, path, key);  // a known type, or an Error
        for (uint64_t i = 0; i < v.array_length; ++i) v.numbers.push_back(read_number(cursor, v.array_type));
      } else {
        cursor.skip(v.array_length * scalar_bytes(v.array_type, path, key), "an array's values");
      }
      break;
    }
    default: fail(path, "metadata '" + key + "' has unknown value type " + std::to_string(type));
  }
  return v;
}

struct Metadata {
  std::map<std::string, Value> values;
  std::string path;

  const Value* find(const std::string& key) const {
    const auto found = values.find(key);
    return found == values.end() ? nullptr : &found->second;
  }
  // A size or id: an integer in [0, 2^30] (Error otherwise), or the fallback when absent.
  int count(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
    const int64_t v = integer(key, fallback);
    if (v < 0 || v > (int64_t(1) << 30)) fail(path, "metadata key '" + key + "' = " + std::to_string(v) + " is out of range");
    return int(v);
  }
  int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
    const Value* v = find(key);
    if (!v) {
      if (fallback) return *fallback;
      fail(path, "metadata key '" + key + "' is missing");
    }
    if (v->type == kString || v->type == kArray || v->type == kFloat32 || v->type == kFloat64)
      fail(path, "metadata key '" + key + "' is not an integer");
    return v->integer;
  }
  double real(const std::string& key, double fallback) const {
    const Value* v = find(key);
    if (!v) return fallback;
    if (v->type == kFloat32 || v->type == kFloat64) return v->real;
    if (v->type == kString || v->type == kArray) fail(path, "metadata key '" + key + "' is not a number");
    return double(v->integer);
  }
  std::string text(const std::string& key) const {
    const Value* v = find(key);
    if (!v) fail(path, "metadata key '" + key + "' is missing");
    if (v->type != kString) fail(path, "metadata key '" + key + "' is not a string");
    return v->text;
  }
};

// GGUF tensor name -> Hugging Face name (see models/source_model.h); "" for tensors the
// runtime does not use. phi3 keeps q/k/v fused (attn_qkv) and gate/up fused (its ffn_up
// holds [gate; up]), named as in Phi-3's Hugging Face checkpoints, split after loading.
std::string hf_tensor_name(const std::string& gguf_name, const std::string& arch) {
  if (gguf_name == "token_embd.weight") return kEmbeddingName;
  if (gguf_name == "output_norm.weight") return kFinalNormName;
  if (gguf_name == "output.weight") return std::string(kLmHeadModule) + ".weight";
  if (gguf_name.rfind("blk.", 0) != 0) return "";
  const size_t dot = gguf_name.find('.', 4);
  if (dot == std::string::npos) return "";
  const std::string layer_text = gguf_name.substr(4, dot - 4);
  if (layer_text.empty() || layer_text.find_first_not_of("0123456789") != std::string::npos || layer_text.size() > 6)
    return "";
  const LayerTensorNames layer = layer_tensor_names(std::stoi(layer_text));
  const std::string rest = gguf_name.substr(dot + 1);  // e.g. "attn_q.weight"
  if (rest == "attn_norm.weight") return layer.attn_norm;
  if (rest == "ffn_norm.weight") return layer.ffn_norm;
  if (arch == "phi3") {
    const std::string prefix = "model.layers." + layer_text + ".";
    if (rest == "attn_qkv.weight") return prefix + "self_attn.qkv_proj.weight";
    if (rest == "ffn_up.weight") return prefix + "mlp.gate_up_proj.weight";
  }
  const std::map<std::string, std::string> linears = {
      {"attn_q", layer.q}, {"attn_k", layer.k}, {"attn_v", layer.v}, {"attn_output", layer.o},
      {"ffn_gate", layer.gate}, {"ffn_up", layer.up}, {"ffn_down", layer.down}};
  const size_t suffix = rest.find('.');
  if (suffix == std::string::npos) return "";
  const auto module = linears.find(rest.substr(0, suffix));
  const std::string part = rest.substr(suffix);  // ".weight" or ".bias"
  const bool qkv = module != linears.end() && (module->first == "attn_q" || module->first == "attn_k" ||
                                               module->first == "attn_v");
  if (module == linears.end() || (part != ".weight" && !(part == ".bias" && qkv))) return "";  // only q/k/v have biases
  return module->second + part;
}

ModelConfig config_from_metadata(const Metadata& meta, const SourceModel& model) {
  ModelConfig c;
  const std::string arch = meta.text("general.architecture");
  if (arch != "llama" && arch != "qwen2" && arch != "phi3")
    fail(meta.path, "architecture '" + arch + "' is not supported (llama, qwen2, phi3)");
  c.architecture = arch;
  const std::string p = arch + ".";
  c.dim = meta.count(p + "embedding_length");
  c.hidden_dim = meta.count(p + "feed_forward_length");
  c.n_layers = meta.count(p + "block_count");
  c.n_heads = meta.count(p + "attention.head_count");
  c.n_kv_heads = meta.count(p + "attention.head_count_kv", c.n_heads);
  if (c.n_heads < 1) fail(meta.path, "attention.head_count " + std::to_string(c.n_heads));
  // Checked before the head size is derived from them: a zero or indivisible width had been
  // reported as a partial rope (rope.dimension_count against dim / heads rounded down).
  if (c.dim < 1) fail(meta.path, p + "embedding_length " + std::to_string(c.dim) + " (need a positive width)");
  if (!meta.find(p + "attention.key_length") && c.dim % c.n_heads != 0)
    fail(meta.path, p + "embedding_length " + std::to_string(c.dim) + " is not divisible by " + p +
                        "attention.head_count " + std::to_string(c.n_heads));
  c.head_dim = meta.count(p + "attention.key_length", c.dim / c.n_heads);
  c.max_seq_len = meta.count(p + "context_length");
  // Phi-3's sliding window: the runtime attends over everything, so the context ends there.
  const int window = meta.count(p + "attention.sliding_window", 0);
  if (window > 0 && window < c.max_seq_len) c.max_seq_len = window;
  if (meta.count(p + "rope.dimension_count", c.head_dim) != c.head_dim)
    fail(meta.path, "rope over part of a head (" + p + "rope.dimension_count) is not supported");
  c.rope_theta = float(meta.real(p + "rope.freq_base", 10000.0));
  c.norm_eps = float(meta.real(p + "attention.layer_norm_rms_epsilon", 1e-5));
  if (const Value* scaling = meta.find(p + "rope.scaling.type"); scaling && meta.text(p + "rope.scaling.type") != "none")
    fail(meta.path, "rope scaling '" + scaling->text + "' is not supported");
  if (model.has("rope_factors_long.weight") || model.has("rope_factors_short.weight"))
    fail(meta.path, "Phi-3's long-context rope scaling (rope_factors_long/short) is not supported");
  if (model.has("rope_freqs.weight"))
    fail(meta.path, "Llama-3 rope scaling (rope_freqs.weight) is not supported from GGUF; convert the Hugging Face "
                    "directory instead");
  if (!model.has(kEmbeddingName)) fail(meta.path, "tensor 'token_embd.weight' is missing");
  c.vocab_size = meta.count(p + "vocab_size", model.shape_of(kEmbeddingName)[0]);
  c.tied_embeddings = !model.has(std::string(kLmHeadModule) + ".weight");
  c.qkv_bias = model.has(layer_tensor_names(0).q + ".bias");
  c.bos_id = meta.count("tokenizer.ggml.bos_token_id", 1);
  c.eos_id = meta.count("tokenizer.ggml.eos_token_id", 2);
  c.validate(meta.path);
  return c;
}

// The llama-style (sentencepiece) vocabulary of tokenizer.ggml.*, or a reason it is not usable.
void read_vocabulary(const Metadata& meta, int vocab_size, SourceModel* model) {
  const Value* kind = meta.find("tokenizer.ggml.model");
  const Value* tokens = meta.find("tokenizer.ggml.tokens");
  if (!kind || !tokens) {
    model->vocabulary_problem = "has no tokenizer.ggml vocabulary";
    return;
  }
  if (kind->text != "llama") {
    model->vocabulary_problem = "has a '" + kind->text + "' vocabulary (only 'llama', sentencepiece-style, is read)";
    return;
  }
  // The built model's <s> is piece 1; its </s> is piece 2, and an eos elsewhere (Phi-3's
  // 32000) is the model config's, at which generation stops as well (gemlite-chat).
  const int bos = int(meta.integer("tokenizer.ggml.bos_token_id", 1));
  if (bos != 1) {
    model->vocabulary_problem = "has bos id " + std::to_string(bos) + " (a built tokenizer needs 1)";
    return;
  }
  if (const Value* prefix = meta.find("tokenizer.ggml.add_space_prefix"); prefix && prefix->integer == 0) {
    model->vocabulary_problem = "asks for no space prefix (a built tokenizer adds one)";
    return;
  }
  const Value* scores = meta.find("tokenizer.ggml.scores");
  const Value* types = meta.find("tokenizer.ggml.token_type");
  const size_t n = tokens->strings.size();
  if (int64_t(n) != vocab_size || (scores && scores->numbers.size() != n) || (types && types->numbers.size() != n))
    fail(meta.path, "tokenizer.ggml arrays of " + std::to_string(n) + " tokens for a vocabulary of " +
                        std::to_string(vocab_size));
  for (size_t i = 0; i < n; ++i) {
    SpmPiece piece;
    piece.text = tokens->strings[i];
    piece.score = scores ? float(scores->numbers[i]) : 0.0f;
    const int type = types ? int(types->numbers[i]) : 1;
    if (type < 1 || type > 6) fail(meta.path, "token " + std::to_string(i) + " has type " + std::to_string(type));
    piece.type = SpmPieceType(type);
    model->vocabulary.push_back(std::move(piece));
  }
}

}  // namespace

bool is_gguf_file(const std::string& path) {
  // Opening a FIFO blocks until a writer comes: only a regular file is looked into (the
  // loader that takes the path next says what is wrong with anything else).
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return false;
  std::ifstream in(path, std::ios::binary);
  uint32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), sizeof magic);
  return in && magic == kMagic;
}

SourceModel load_gguf(const std::string& path) {
  const std::shared_ptr<const MappedFile> file = MappedFile::open(path);
  Cursor cursor(*file, path);
  if (cursor.read<uint32_t>("the magic") != kMagic) fail(path, "not a GGUF file (bad magic)");
  const uint32_t version = cursor.read<uint32_t>("the version");
  if (version != 2 && version != 3) fail(path, "GGUF version " + std::to_string(version) + " (2 or 3 expected)");
  const uint64_t n_tensors = cursor.read<uint64_t>("the tensor count");
  const uint64_t n_values = cursor.read<uint64_t>("the metadata count");
  if (n_tensors > (uint64_t(1) << 24) || n_values > (uint64_t(1) << 24))
    fail(path, "corrupt header (" + std::to_string(n_tensors) + " tensors, " + std::to_string(n_values) +
                   " metadata values)");

  Metadata meta;
  meta.path = path;
  for (uint64_t i = 0; i < n_values; ++i) {
    const std::string key = cursor.read_string("a metadata key");
    const uint32_t type = cursor.read<uint32_t>("a metadata type");
    meta.values[key] = read_value(cursor, type, path, key);
  }

  struct Info {
    std::string name;
    std::vector<int64_t> shape;  // row-major, outermost first (GGUF lists innermost first)
    uint32_t type;
    uint64_t offset;
  };
  std::vector<Info> infos;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Info info;
    info.name = cursor.read_string("a tensor name");
    const uint32_t n_dims = cursor.read<uint32_t>("a tensor's rank");
    if (n_dims < 1 || n_dims > 4) fail(path, "tensor '" + info.name + "' has rank " + std::to_string(n_dims));
    info.shape.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t extent = cursor.read<uint64_t>("a tensor's shape");
      if (extent < 1 || extent > (uint64_t(1) << 32)) fail(path, "tensor '" + info.name + "' has a bad shape");
      info.shape[n_dims - 1 - d] = int64_t(extent);
    }
    info.type = cursor.read<uint32_t>("a tensor's type");
    info.offset = cursor.read<uint64_t>("a tensor's offset");
    infos.push_back(std::move(info));
  }
  const uint64_t alignment = uint64_t(meta.integer("general.alignment", int64_t(kDefaultAlignment)));
  if (alignment == 0 || alignment % 8 != 0 || alignment > (1u << 20))
    fail(path, "general.alignment " + std::to_string(alignment));
  const uint64_t data_start = (cursor.at() + alignment - 1) / alignment * alignment;

  SourceModel model;
  const std::string arch = meta.text("general.architecture");
  // Rope factor tensors are kept only so that config_from_metadata can refuse them.
  const auto rope_factors = [](const std::string& name) {
    return name == "rope_freqs.weight" || name == "rope_factors_long.weight" || name == "rope_factors_short.weight";
  };
  std::vector<ByteRange> ranges;  // of the tensors read, checked for overlap below
  for (const Info& info : infos) {
    const std::string name = rope_factors(info.name) ? info.name : hf_tensor_name(info.name, arch);
    if (name.empty()) continue;  // a tensor the runtime does not use
    if (model.tensors.count(name) || model.block_sources.count(name))
      fail(path, "tensor '" + info.name + "' appears twice");
    const GgmlType* type = ggml_type(info.type);
    if (!type)
      fail(path, "tensor '" + info.name + "' is " + ggml_type_name(info.type) +
                     "; GGUF import reads " + ggml_readable_type_names() + " (re-convert with --outtype f16)");
    HostTensor tensor;
    tensor.shape = info.shape;
    if (info.shape.back() % type->block_elements != 0)
      fail(path, "tensor '" + info.name + "' " + tensor.shape_string() + " is not in whole " + type->name + " blocks");
    // Its bytes, grown dimension by dimension, never past the file (no overflow).
    uint64_t bytes = uint64_t(type->block_bytes);
    for (size_t d = 0; d < info.shape.size(); ++d) {
      const uint64_t extent = uint64_t(info.shape[d]) / (d + 1 == info.shape.size() ? type->block_elements : 1);
      if (extent > file->size() / bytes)
        fail(path, "truncated: tensor '" + info.name + "' " + tensor.shape_string() + " is larger than the file");
      bytes *= extent;
    }
    if (info.offset > file->size() || data_start > file->size() - info.offset ||
        bytes > file->size() - data_start - info.offset)
      fail(path, "truncated: tensor '" + info.name + "' ends past the end of the file");
    // GGUF writers place every tensor at a multiple of general.alignment; an offset that is
    // not means a corrupt header (it had been read as shifted bytes: a misleading NaN).
    if (info.offset % alignment != 0)
      fail(path, "tensor '" + info.name + "' is at offset " + std::to_string(info.offset) +
                     ", not a multiple of general.alignment " + std::to_string(alignment));
    ranges.push_back({info.name, info.offset, info.offset + bytes});
    const uint8_t* data = file->data() + data_start + info.offset;
    if (!type->plain) {
      BlockSource source;  // the file's blocks, decoded when the quantizer asks (SourceModel::tensor)
      source.type_id = info.type;
      source.blocks.dtype = DType::U8;
      int64_t rows = 1;  // all leading dimensions
      for (size_t d = 0; d + 1 < info.shape.size(); ++d) rows *= info.shape[d];
      source.blocks.shape = {rows, info.shape.back() / type->block_elements * type->block_bytes};
      source.blocks.data = data;
      source.blocks.owner = file;
      if (info.shape.size() == 2) {
        model.block_sources[name] = std::move(source);
      } else {  // rare: a quantized tensor that is not a matrix, decoded now
        HostTensor values = source.dequantize();
        values.shape = info.shape;
        model.tensors[name] = std::move(values);
      }
      continue;
    }
    const DType dtype = info.type == 0 ? DType::F32 : info.type == 1 ? DType::F16 : DType::BF16;
    tensor.dtype = dtype;
    if (reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) != 0) {
      tensor = HostTensor::copy_of(dtype, info.shape, data);  // misaligned: an aligned copy
    } else {
      tensor.data = data;
      tensor.owner = file;
    }
    model.tensors[name] = std::move(tensor);
  }
  check_no_overlap(path, std::move(ranges));
  model.config = config_from_metadata(meta, model);
  read_vocabulary(meta, model.config.vocab_size, &model);
  if (model.config.architecture == "phi3") split_fused_projections(model, path);
  check_source_tensors(model, path);

  // GGUF's llama tensors rotate interleaved pairs (llama.cpp's "normal" RoPE, like Meta's
  // and llama2.c's checkpoints); the runtime rotates halves. qwen2 and phi3 are stored
  // rotate-half.
  if (model.config.architecture == "llama") interleaved_to_rotate_half_qk(model);
  return model;
}

}  // namespace gemlite
