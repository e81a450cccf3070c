// gemlite-perplexity: perplexity of a text file with llama.cpp's protocol, so the numbers
// compare with llama-perplexity's: the whole file tokenized once with BOS, non-overlapping
// chunks of n_ctx tokens, the first token of each chunk replaced by BOS, and only the
// second half of each chunk scored (every scored token sees at least n_ctx/2 of context).
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "examples/common/program.h"
#include "runtime/error.h"

using namespace gemlite;

namespace {

std::string read_text(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) fail(path, "not a readable file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().empty()) fail(path, "is empty");
  return text.str();
}

// -log softmax(logits)[target], in double so 32000-way sums keep their precision.
double negative_log_likelihood(const float* logits /*[vocab]*/, int vocab, int target) {
  float max_logit = logits[0];
  for (int i = 1; i < vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max_logit);
  return std::log(sum) - (double(logits[target]) - max_logit);
}

}  // namespace

int main(int argc, char** argv) {
  return run_program("gemlite-perplexity", [&] {
    cxxopts::Options options("gemlite-perplexity", "Perplexity of a text file (llama-perplexity's protocol).");
    add_model_options(options);
    options.add_options()
        ("f,file", "Text file to score", cxxopts::value<std::string>())
        ("c,ctx-size", "Tokens per chunk", cxxopts::value<int>()->default_value("512"))
        ("chunks", "Score only the first N chunks (-1 = all)", cxxopts::value<int>()->default_value("-1"));
    const auto args = parse_args(options, argc, argv);
    if (!args.count("model")) throw Error("missing -m/--model DIR (see --help)");
    if (!args.count("file")) throw Error("missing -f/--file FILE (see --help)");
    apply_thread_option(args);
    const int n_ctx = args["ctx-size"].as<int>();
    if (n_ctx < 4) throw Error("--ctx-size must be at least 4");
    const int max_chunks = args["chunks"].as<int>();
    if (max_chunks == 0 || max_chunks < -1) throw Error("--chunks must be -1 (all) or >= 1");

    const std::string path = args["file"].as<std::string>();
    const std::string text = read_text(path);
    // The text is tokenized and checked before the model and its KV cache are allocated.
    const std::string model_dir = args["model"].as<std::string>();
    const PackedCheckpoint header = load_packed_checkpoint(model_dir);
    if (header.tokenizer_path.empty()) fail(model_dir + "/tokenizer.model", "missing");
    const Tokenizer tokenizer = Tokenizer::load(header.tokenizer_path);
    check_tokenizer_fits(tokenizer, header.config, header.tokenizer_path);
    std::fprintf(stderr, "perplexity: tokenizing the input ..\n");
    double start = now_seconds();
    const std::vector<int> tokens = tokenizer.encode(text, /*add_bos=*/true);
    std::fprintf(stderr, "perplexity: tokenization took %.1f ms, %zu tokens\n",
                 (now_seconds() - start) * 1e3, tokens.size());
    if (int64_t(tokens.size()) < 2 * int64_t(n_ctx))
      fail(path, "has " + std::to_string(tokens.size()) + " tokens; need at least " +
                     std::to_string(2 * n_ctx) + " for --ctx-size " + std::to_string(n_ctx));

    LoadedModel loaded = load_model(model_dir, args["device"].as<std::string>(), n_ctx, /*need_tokenizer=*/true,
                                    backend_options(args));
    if (n_ctx > loaded.checkpoint.config.max_seq_len)
      std::fprintf(stderr, "warning: --ctx-size %d is beyond the model's training context of %d\n",
                   n_ctx, loaded.checkpoint.config.max_seq_len);
    int n_chunks = int(tokens.size()) / n_ctx;
    if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);
    std::fprintf(stderr, "perplexity: calculating perplexity over %d chunks, n_ctx=%d, backend=%s\n",
                 n_chunks, n_ctx, loaded.backend->name().c_str());

    const int vocab = loaded.checkpoint.config.vocab_size;
    const int first_scored = n_ctx / 2;
    double nll_sum = 0, nll_squared_sum = 0;
    long scored = 0;
    std::vector<float> logits;  // [n_ctx, vocab]
    start = now_seconds();
    for (int chunk = 0; chunk < n_chunks; ++chunk) {
      std::vector<int> ids(tokens.begin() + long(chunk) * n_ctx, tokens.begin() + long(chunk + 1) * n_ctx);
      ids[0] = loaded.tokenizer->bos_id();
      loaded.model->forward(ids, 0, /*all_logits=*/true, logits);
      // logits at position j predict token j + 1
      for (int j = first_scored; j < n_ctx - 1; ++j) {
        const double nll = negative_log_likelihood(&logits[size_t(j) * vocab], vocab, ids[j + 1]);
        nll_sum += nll;
        nll_squared_sum += nll * nll;
        ++scored;
      }
      if (chunk == 0) {
        const double seconds = now_seconds() - start;
        std::fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", seconds,
                     seconds * n_chunks / 60.0);
      }
      std::printf("[%d]%.4f,", chunk + 1, std::exp(nll_sum / scored));
      std::fflush(stdout);
    }
    // llama.cpp's estimate: PPL = exp(mean nll), error = PPL * standard error of the mean.
    const double mean = nll_sum / scored;
    const double variance = nll_squared_sum / scored - mean * mean;
    const double standard_error = scored > 1 && variance > 0 ? std::sqrt(variance / (scored - 1)) : 0;
    const double ppl = std::exp(mean);
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, standard_error * ppl);
    return 0;
  });
}
