#include "examples/common/program.h"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <typeinfo>
#include <vector>

#include "runtime/error.h"
#include "runtime/interrupt.h"
#include "runtime/io/readable_file.h"

namespace gemlite {

int run_program(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const Interrupted& e) {  // the writers removed their temporaries on the way out
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return e.exit_code;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "%s: error: %s (see --help)\n", program, e.what());
  } catch (const std::bad_alloc&) {
    // Host memory: the weights and the KV cache (-c positions in chat and perplexity; in
    // bench the largest -d plus the longest -p/-n/--pg).
    std::fprintf(stderr, "%s: error: out of memory (a shorter context shrinks the KV cache: -c/--ctx-size, or "
                 "gemlite-bench's -d/-p/-n)\n", program);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  }
  return 1;
}

cxxopts::ParseResult parse_args(cxxopts::Options& options, int argc, char** argv,
                                const std::vector<std::pair<std::string, std::string>>& aliases) {
  options.add_options()("h,help", "Print this help");
  std::vector<std::string> words(argv, argv + argc);
  for (auto& word : words)
    for (const auto& [alias, long_name] : aliases)
      if (word == alias) word = long_name;
  std::vector<char*> rewritten;
  for (auto& word : words) rewritten.push_back(word.data());
  cxxopts::ParseResult result;
  try {
    result = options.parse(int(rewritten.size()), rewritten.data());
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    // cxxopts names the value only ("Argument 'abc' failed to parse"); the flag it was
    // given to is the word before it, or the part before '=' of the same word.
    const std::string message = e.what();
    const auto names = [&](const std::string& value) {  // cxxopts quotes with ' ' or with ‘ ’
      return message.find("'" + value + "'") != std::string::npos ||
             message.find("\u2018" + value + "\u2019") != std::string::npos;
    };
    // A list flag's word names the item that failed ("-p 16,,32": the empty one).
    const auto names_item_of = [&](const std::string& word) {
      if (names(word)) return true;
      std::istringstream items(word);
      std::string item;
      while (std::getline(items, item, ','))
        if (names(item)) return true;
      return false;
    };
    // cxxopts reads "-ngl 99" as -n with the value "gl": a value that is the rest of a
    // single-dash word is one of llama.cpp's multi-letter flags this program lacks.
    for (size_t i = 1; i < words.size(); ++i) {
      const std::string& word = words[i];
      if (word.size() > 2 && word[0] == '-' && std::isalpha(static_cast<unsigned char>(word[1])) &&
          names(word.substr(2)))
        throw Error("unknown option '" + word + "' (see --help)");
    }
    std::string flag;
    for (size_t i = 1; i < words.size() && flag.empty(); ++i) {
      const std::string& word = words[i];
      if (word.rfind("-", 0) != 0) continue;
      const size_t equals = word.find('=');
      if (equals != std::string::npos && names_item_of(word.substr(equals + 1)))
        flag = word.substr(0, equals);
      else if (equals == std::string::npos && i + 1 < words.size() && names_item_of(words[i + 1]))
        flag = word;
    }
    throw Error((flag.empty() ? std::string() : flag + ": ") + e.what() + " (see --help)");
  }
  if (result.count("help")) {
    std::printf("%s\n", options.help().c_str());
    std::exit(0);
  }
  if (!result.unmatched().empty())
    throw Error("unexpected argument '" + result.unmatched().front() + "' (see --help)");
  // A list with an empty item is a typo, refused whole: cxxopts drops a trailing one ("-p
  // 16," ran as -p 16), keeps one in a list of strings, and fails to parse one inside a list
  // of numbers ("-p 16,,32", named above).
  for (const cxxopts::KeyValue& given : result.arguments()) {
    bool is_list = true;
    try {
      (void)result[given.key()].as<std::vector<int>>();
    } catch (const std::bad_cast&) {
      try {
        (void)result[given.key()].as<std::vector<std::string>>();
      } catch (const std::bad_cast&) {
        is_list = false;
      }
    }
    const std::string& text = given.value();
    if (is_list && (text.empty() || text.front() == ',' || text.back() == ',' || text.find(",,") != std::string::npos))
      throw Error("--" + given.key() + ": '" + text + "' has an empty item (see --help)");
  }
  // cxxopts reads a float with operator>>, which stops at the first character it cannot
  // use: "--temp 0,7" was 0 (greedy), "--top-p 0.9.9" 0.9. Every float given must be read
  // whole the same way (so "0x1p+1" is refused, not read as 0).
  for (const cxxopts::KeyValue& given : result.arguments()) {
    try {
      (void)result[given.key()].as<float>();
    } catch (const std::bad_cast&) {
      continue;  // not a float option
    }
    const std::string& text = given.value();
    std::istringstream in(text);
    float value = 0;
    char extra = 0;
    if (!(in >> value) || (in >> extra) || !std::isfinite(value))
      throw Error("--" + given.key() + ": '" + text + "' is not a number (see --help)");
  }
  return result;
}

void add_model_options(cxxopts::Options& options) {
  options.add_options()("m,model", "Packed checkpoint directory (made by gemlite-quantize)",
                        cxxopts::value<std::string>());
  add_backend_options(options);
}

void add_backend_options(cxxopts::Options& options) {
  options.add_options()
      ("device", "cpu or cuda (default: cuda when available)", cxxopts::value<std::string>()->default_value(""))
      ("dtype", "cuda activations and KV cache: f16 or bf16 (the CPU computes in f32)",
       cxxopts::value<std::string>()->default_value("f16"))
      ("t,threads", "CPU threads (0 = all cores)", cxxopts::value<int>()->default_value("0"));
}

std::string backend_name_for(const std::string& device) { return device.empty() ? default_backend_name() : device; }

BackendOptions backend_options(const cxxopts::ParseResult& args) {
  BackendOptions options;
  options.activations = parse_activation_type(args["dtype"].as<std::string>());
  return options;
}

void apply_thread_option(const cxxopts::ParseResult& args) {
  const int threads = args["threads"].as<int>();
  // More threads than a few per core only thrash; tens of thousands crash libgomp.
  const int most = 4 * std::max(1, omp_get_num_procs());
  if (threads < 0 || threads > most)
    throw Error("--threads " + std::to_string(threads) + ": expected 0 (all cores) .. " + std::to_string(most) +
                " (4 per core)");
  if (threads > 0) omp_set_num_threads(threads);
}

void check_tokenizer_fits(const Tokenizer& tokenizer, const ModelConfig& config, const std::string& path) {
  if (tokenizer.vocab_size() > config.vocab_size)
    fail(path, "has " + std::to_string(tokenizer.vocab_size()) + " pieces but the model's vocabulary has " +
                   std::to_string(config.vocab_size) + " (wrong tokenizer for this model?)");
  if (tokenizer.bos_id() < 0) fail(path, "has no BOS token");
}

Tokenizer load_checkpoint_tokenizer(const PackedCheckpoint& ckpt, const std::string& dir) {
  if (ckpt.tokenizer_path.empty())
    fail((std::filesystem::path(dir) / "tokenizer.model").string(),
         "missing (convert the model again with gemlite-quantize --tokenizer TOKENIZER)");
  Tokenizer tokenizer = Tokenizer::load(ckpt.tokenizer_path);
  check_tokenizer_fits(tokenizer, ckpt.config, ckpt.tokenizer_path);
  tokenizer.set_rstrip(ckpt.rstrip_token_ids);
  return tokenizer;
}

LoadedModel load_model(const std::string& dir, const std::string& device, int context,
                       bool need_tokenizer, const BackendOptions& options) {
  LoadedModel loaded;
  loaded.checkpoint = load_packed_checkpoint(dir);
  if (!loaded.checkpoint.tokenizer_path.empty() || need_tokenizer)
    loaded.tokenizer = std::make_unique<Tokenizer>(load_checkpoint_tokenizer(loaded.checkpoint, dir));
  const int trained = loaded.checkpoint.config.max_seq_len;
  if (context == kDefaultContext) context = std::min(kDefaultContextPositions, trained);
  if (context < 0) throw Error("--ctx-size must be >= 0");
  if (context > trained)
    std::fprintf(stderr, "warning: --ctx-size %d is beyond the model's training context of %d\n", context, trained);
  loaded.backend = make_backend(backend_name_for(device), options);
  loaded.model = std::make_unique<LlamaModel>(loaded.checkpoint, *loaded.backend, context);
  // A warm-up like llama.cpp's (a 2-token prompt, then one decode step) on the GPU: the
  // first real token then pays neither for lazy kernel loading nor for capturing the decode
  // graph (a longer prompt still loads the prefill kernels on first use). Positions 0..2 of
  // the cache are overwritten by what is fed next.
  // The CPU backend has nothing to warm up.
  if (loaded.backend->name() == "cuda" && loaded.model->context() >= 3) {
    std::vector<float> unused;
    loaded.model->forward({0, 0}, 0, false, unused);
    loaded.model->forward({0}, 2, false, unused);
  }
  return loaded;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string read_text_file(const std::string& path) {
  require_readable_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  std::ostringstream stream;
  stream << in.rdbuf();
  std::string text = stream.str();  // str() copies: taken once
  if (text.empty()) fail(path, "is empty");
  // A binary file read as text scored a perplexity in the billions, without a word.
  const size_t nul = text.find('\0');
  if (nul != std::string::npos) fail(path, "is not text (a NUL byte at offset " + std::to_string(nul) + ")");
  return text;
}

std::string process_escapes(const std::string& text) {
  const auto hex_digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char c = text[i + 1];
    const char simple = c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c == '\'' || c == '"' || c == '\\' ? c : 0;
    if (simple) {
      out += simple;
      ++i;
    } else if (c == 'x' && i + 3 < text.size() && hex_digit(text[i + 2]) >= 0 && hex_digit(text[i + 3]) >= 0) {
      const int byte = hex_digit(text[i + 2]) * 16 + hex_digit(text[i + 3]);
      if (byte == 0) throw Error("\\x00 in a prompt: a NUL byte is not text (--no-escape takes it as written)");
      out += char(byte);
      i += 3;
    } else {
      out += '\\';  // not an escape: kept, and the next character read as usual
    }
  }
  return out;
}

}  // namespace gemlite
