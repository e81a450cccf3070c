// gemlite-quantize: a Hugging Face directory, a GGUF file (plain or block-quantized) or a
// llama2.c .bin -> packed checkpoint.
//   gemlite-quantize SOURCE OUTPUT_DIR FORMAT [--override lm_head=q8 ...] [--tokenizer T]
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "examples/common/program.h"
#include "models/import_gguf.h"
#include "models/import_hf.h"
#include "models/import_llama2c.h"
#include "models/pack_ggml_codes.h"
#include "models/packed_checkpoint.h"
#include "models/quantize_model.h"
#include "runtime/error.h"
#include "runtime/interrupt.h"
#include "runtime/io/mapped_file.h"
#include "runtime/io/output_file.h"
#include "runtime/io/readable_file.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/spm_model.h"

using namespace gemlite;
namespace fs = std::filesystem;

namespace {

SourceModel load_source(const std::string& path) {
  const fs::file_type type = file_type_at(path);
  if (type == fs::file_type::directory && is_packed_checkpoint(path))
    fail(path, "is a gemlite packed checkpoint already; quantize the model it was made from");
  if (type == fs::file_type::directory) return load_hf_directory(path);
  if (type == fs::file_type::not_found) fail(path, "no such file or directory");
  if (is_gguf_file(path)) return load_gguf(path);
  // Read as llama2.c, a damaged .gguf would be reported as a llama2.c header out of range.
  if (fs::path(path).extension() == ".gguf") fail(path, "not a GGUF file (it does not start with 'GGUF')");
  return load_llama2c(path);
}

// "[=======>       ]  12/41  model.layers.1.mlp.up_proj" redrawn in place on a terminal;
// one line per tenth of the work otherwise (logs stay short).
void show_progress(int done, int total, const std::string& module) {
  static const bool terminal = isatty(STDERR_FILENO);
  const int width = 30, filled = width * done / total;
  if (terminal) {
    std::fprintf(stderr, "\r[%s%s] %4d/%d  %-48s", std::string(filled, '=').c_str(),
                 std::string(width - filled, ' ').c_str(), done, total, module.c_str());
    if (done == total) std::fprintf(stderr, "\n");
  } else if (done == total || (done * 10 / total) != ((done - 1) * 10 / total)) {
    std::fprintf(stderr, "quantized %d/%d modules (%s)\n", done, total, module.c_str());
  }
}

// A sentencepiece model made here (tokenizer/spm_model.h: from a vocabulary, or a
// tokenizer.model with added tokens), in a temporary file that save_packed_checkpoint
// copies as the checkpoint's tokenizer.model; removed when the program ends.
class BuiltTokenizer {
 public:
  explicit BuiltTokenizer(const std::string& proto) {
    char name[] = "/tmp/gemlite-tokenizer-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) fail(name, "cannot create a temporary file");
    path_ = name;
    // mkstemp makes it 0600 and copy_file keeps that: give it a plain file's mode, as the
    // checkpoint's other files have.
    fchmod(fd, plain_mode(0666));
    const bool written = write(fd, proto.data(), proto.size()) == ssize_t(proto.size());
    close(fd);
    if (!written) fail(path_, "write failed");
  }
  ~BuiltTokenizer() {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

int main(int argc, char** argv) {
  return run_program("gemlite-quantize", [&] {
    cxxopts::Options options("gemlite-quantize",
        "Convert a Hugging Face model directory, a GGUF file (F32/F16/BF16, Q4_0..Q8_0, Q2_K..Q6_K) or a llama2.c "
        ".bin checkpoint into a gemlite packed checkpoint.\nFormats: qN or qNgG (N = 1..8 bits, G = 32/64/128), "
        "s7, s7gG, fp6, fp5, f16, bf16, f32; gguf: each quantized GGUF tensor in the format nearest its type.");
    options.positional_help("SOURCE OUTPUT_DIR FORMAT");
    options.add_options()
        ("source", "HF directory, .gguf file or llama2.c .bin", cxxopts::value<std::string>())
        ("output", "Packed checkpoint directory to write", cxxopts::value<std::string>())
        ("format", "Weight format of every linear layer; 'gguf': each quantized GGUF tensor in the "
                   "format nearest its type", cxxopts::value<std::string>())
        ("override", "PATTERN=FORMAT for matching modules, e.g. lm_head=q8 (repeatable)",
         cxxopts::value<std::vector<std::string>>())
        ("tokenizer", "sentencepiece tokenizer.model or llama2.c tokenizer.bin (without one a llama2.c source "
                      "converts, but only gemlite-bench and gemlite-logits --ids can run it; GGUF sources use their "
                      "own vocabulary when it is sentencepiece-style)",
         cxxopts::value<std::string>())
        ("chat-template", "Record the chat template: completion, llama2, zephyr (tinyllama), mistral, chatml or phi3",
         cxxopts::value<std::string>());
    options.parse_positional({"source", "output", "format"});
    const auto args = parse_args(options, argc, argv);
    for (const char* required : {"source", "output", "format"})
      if (!args.count(required))
        throw Error(std::string("missing ") + required + " (usage: gemlite-quantize SOURCE OUTPUT_DIR FORMAT)");

    const std::string output = args["output"].as<std::string>();
    check_can_save_packed_checkpoint(output);
    install_interrupt_handlers();  // Ctrl-C leaves no temporary output behind
    // FORMAT gguf: each block-quantized tensor of a GGUF in the gemlite format nearest its
    // type (pack_ggml_codes.h), unquantized ones f16; --override still applies after it.
    // Any other name is checked before the source is read.
    const std::string format = args["format"].as<std::string>();
    const bool keep_gguf_types = format == "gguf";
    QuantizeSpec spec;
    if (!keep_gguf_types) spec.format = WeightFormat::parse(format);
    std::vector<std::pair<std::string, WeightFormat>> user_overrides;
    if (args.count("override"))
      for (const auto& text : args["override"].as<std::vector<std::string>>())
        user_overrides.push_back(parse_override(text));
    if (args.count("chat-template"))
      spec.chat_template = chat_template_name(parse_chat_template(args["chat-template"].as<std::string>()));
    const std::string source_path = args["source"].as<std::string>();
    SourceModel source = load_source(source_path);
    if (keep_gguf_types) {
      if (source.block_sources.empty())
        fail(source_path, "FORMAT gguf keeps a quantized GGUF's types, but this source has no quantized tensors "
                          "(give f16 or f32)");
      spec.format = WeightFormat::parse("f16");
      spec.overrides = formats_nearest_ggml_blocks(source);
    }
    spec.overrides.insert(spec.overrides.end(), user_overrides.begin(), user_overrides.end());  // the user's win

    check_overrides_match(spec, source.config);
    // The tokenizer: a sentencepiece model (the HF directory's, or --tokenizer), else one
    // built from a llama2.c tokenizer.bin given as --tokenizer or from the GGUF's vocabulary.
    std::optional<BuiltTokenizer> built;
    std::string built_from, built_what;  // a built tokenizer's problems name its source and how it was made
    if (args.count("tokenizer")) {
      const std::string path = args["tokenizer"].as<std::string>();
      if (file_type_at(path) == fs::file_type::regular && is_llama2c_tokenizer(path)) {
        built.emplace(spm_bpe_model_proto(read_llama2c_tokenizer(path, source.config.vocab_size), path));
        built_from = path;
        built_what = "the tokenizer built from its vocabulary";
      }
      source.tokenizer_path = built ? built->path() : path;
    } else if (source.tokenizer_path.empty() && !source.vocabulary.empty()) {
      built.emplace(spm_bpe_model_proto(source.vocabulary, source_path));
      built_from = source_path;
      built_what = "the tokenizer built from its vocabulary";
      source.tokenizer_path = built->path();
      std::fprintf(stderr, "tokenizer: built from the vocabulary in %s\n", source_path.c_str());
    } else if (!source.tokenizer_path.empty() && !source.added_tokens.empty()) {
      // A Hugging Face tokenizer.model plus tokenizer.json's added tokens (Phi-3's chat markers).
      const Tokenizer base = Tokenizer::load(source.tokenizer_path);
      const int pieces = base.vocab_size();
      const size_t added = size_t(std::count_if(source.added_tokens.begin(), source.added_tokens.end(), [&](const auto& t) {
        return t.first >= pieces && t.first < source.config.vocab_size;
      }));
      const std::string tokenizer_json = (fs::path(source_path) / "tokenizer.json").string();
      const auto model = MappedFile::open(source.tokenizer_path);
      const std::string proto(reinterpret_cast<const char*>(model->data()), model->size());
      const std::string extended =
          spm_model_with_added_tokens(proto, base, source.config.vocab_size, source.added_tokens, tokenizer_json);
      if (added > 0) {
        built.emplace(extended);
        built_from = tokenizer_json;
        built_what = "tokenizer.model with these added tokens";
        std::fprintf(stderr, "tokenizer: %s + %zu added tokens of tokenizer.json\n", source.tokenizer_path.c_str(),
                     added);
        source.tokenizer_path = built->path();
      }
    }
    if (!source.tokenizer_path.empty()) {
      const std::string named = built ? built_from
                                : args.count("tokenizer") ? args["tokenizer"].as<std::string>()
                                                          : source_path;
      // Fail now, not after the quantization; a built model's problems name its source.
      try {
        const Tokenizer tokenizer = Tokenizer::load(source.tokenizer_path);
        check_tokenizer_fits(tokenizer, source.config, named);
        // tokenizer.json may mark "rstrip" on tokens that are no markers of the written
        // tokenizer (its </s>, a <pad> past the model's rows, or all of them when --tokenizer
        // replaced it): kept, gemlite-chat refused the checkpoint.
        std::vector<int>& rstrip = source.rstrip_token_ids;
        rstrip.erase(std::remove_if(rstrip.begin(), rstrip.end(), [&](int id) { return !tokenizer.is_marker(id); }),
                     rstrip.end());
      } catch (const Error& e) {
        if (!built) throw;
        fail(named, built_what + ": " + e.what());
      }
    } else {
      source.rstrip_token_ids.clear();  // markers of no tokenizer
      std::fprintf(stderr, "warning: no tokenizer.model%s; pass --tokenizer so gemlite-chat can run it\n",
                   source.vocabulary_problem.empty() ? "" : (" (" + source_path + " " + source.vocabulary_problem + ")").c_str());
    }

    const ModelConfig& c = source.config;
    std::fprintf(stderr, "%s: %s, %d layers, dim %d, %d heads (%d kv), vocab %d -> %s\n",
                 source_path.c_str(), c.architecture.c_str(), c.n_layers, c.dim, c.n_heads,
                 c.n_kv_heads, c.vocab_size, keep_gguf_types ? "the GGUF's types" : spec.format.name().c_str());
    const double start = now_seconds();
    int from_codes = 0, modules = 0;
    PackedCheckpoint packed;
    try {
      packed = quantize_model(source, spec, [&](int done, int total, const std::string& module, PackedFrom how) {
        show_progress(done, total, module);
        throw_if_interrupted("quantizing");
        from_codes += how == PackedFrom::SourceCodes;
        modules = total;
      });
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {
      fail(source_path, e.what());  // the tensor is named, the file too
    }
    save_packed_checkpoint(packed, output);
    std::fprintf(stderr, "wrote %s: %.2f MiB of weights in %.1f s\n", output.c_str(),
                 packed.weight_bytes() / 1048576.0, now_seconds() - start);
    if (!source.block_sources.empty())  // a quantized GGUF: say which modules kept its codes
      std::fprintf(stderr, "%d of %d linear modules packed from %s's own codes%s\n", from_codes, modules,
                   source_path.c_str(),
                   keep_gguf_types || from_codes == modules
                       ? ""
                       : " (FORMAT gguf, or qNg32 of a tensor's bits, keeps the codes of Q4_*, Q5_* and Q8_0 tensors)");
    return 0;
  });
}
