#pragma once
// What every gemlite program shares: argument parsing with cxxopts, the one-line error
// convention (exit 1), and loading a packed model onto a backend.
#include <cxxopts.hpp>
#include <functional>
#include <memory>
#include <string>

#include "models/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace gemlite {

// Runs body(); prints "<program>: error: <message>" and returns 1 on any Error, cxxopts
// parse error or std::exception, so no bad input ends in a crash; on Interrupted
// (runtime/interrupt.h) "<program>: interrupted while ..." and 128 + the signal.
int run_program(const char* program, const std::function<int()>& body);

// Parses argv, rewriting llama.cpp's multi-letter short flags given in `aliases` (chat's
// {"-sys", "--system-prompt"}, bench's {"-pg", "--pg"}); prints help and exits 0 on --help.
cxxopts::ParseResult parse_args(cxxopts::Options& options, int argc, char** argv,
                                const std::vector<std::pair<std::string, std::string>>& aliases = {});

// A packed checkpoint loaded onto a backend, with its tokenizer.
struct LoadedModel {
  PackedCheckpoint checkpoint;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the checkpoint has none
};

// load_model's context when -c/--ctx-size is not given: llama-cli's default of 4096
// positions, or the model's own context where that is shorter. (The model's whole context
// by default gave a Llama-3.1-shaped model, 131072 positions, a 16 GiB fp16 KV cache.)
constexpr int kDefaultContext = -1;
constexpr int kDefaultContextPositions = 4096;

// Loads `dir` (Error naming the file on any problem) on `device` ("" = default backend)
// with a KV cache of `context` positions (0 = the model's max_seq_len; kDefaultContext;
// beyond the model's, a warning). With need_tokenizer, a missing tokenizer.model is an
// error.
LoadedModel load_model(const std::string& dir, const std::string& device, int context,
                       bool need_tokenizer, const BackendOptions& options = {});

// Throws Error naming `path` when the tokenizer cannot serve this model (more pieces than
// the model's vocabulary, or no BOS).
void check_tokenizer_fits(const Tokenizer& tokenizer, const ModelConfig& config, const std::string& path);

// The tokenizer of checkpoint `ckpt` loaded from `dir`, checked to fit it, with its
// markers' rstrip set; Error naming <dir>/tokenizer.model when the checkpoint has none.
Tokenizer load_checkpoint_tokenizer(const PackedCheckpoint& ckpt, const std::string& dir);

// Adds the flags every program that runs a model takes: -m/--model and add_backend_options'.
void add_model_options(cxxopts::Options& options);
// --device, --dtype and -t/--threads (gemlite-bench, whose -m is a list, takes these alone).
void add_backend_options(cxxopts::Options& options);
// The backend --device names: itself, or default_backend_name() for "" (not given).
std::string backend_name_for(const std::string& device);
// --dtype f16|bf16 (the GPU's activations and KV cache; f16, like llama.cpp's CUDA
// backend and calm, unless asked) -> backend options.
BackendOptions backend_options(const cxxopts::ParseResult& args);
// Applies -t/--threads (0 = all cores) to OpenMP.
void apply_thread_option(const cxxopts::ParseResult& args);

double now_seconds();  // monotonic clock

// The whole file as bytes; Error naming `path` when it is missing, not a regular file,
// unreadable, empty or not text (a NUL byte).
std::string read_text_file(const std::string& path);

// A prompt typed on the command line with llama.cpp's escapes read (its -e, on unless
// --no-escape): \n \r \t \' \" \\ and \xHH; any other backslash stays as written.
std::string process_escapes(const std::string& text);

}  // namespace gemlite
