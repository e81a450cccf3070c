// gemlite-perplexity: perplexity of a text file with llama.cpp's protocol, so the numbers
// compare with llama-perplexity's: the whole file tokenized once with BOS, non-overlapping
// chunks of n_ctx tokens, the first token of each chunk replaced by BOS, and only the
// second half of each chunk scored (every scored token sees at least n_ctx/2 of context).
// --kl-divergence-base FILE saves the scored log-probabilities; adding --kl-divergence
// compares another model with them (examples/common/kl_divergence.h), as llama-perplexity.
#include <cmath>
#include <memory>
#include <optional>
#include <cstdio>

#include "examples/common/kl_divergence.h"
#include "examples/common/program.h"
#include "runtime/error.h"
#include "runtime/interrupt.h"

using namespace gemlite;

int main(int argc, char** argv) {
  return run_program("gemlite-perplexity", [&] {
    cxxopts::Options options("gemlite-perplexity", "Perplexity of a text file (llama-perplexity's protocol).");
    add_model_options(options);
    options.add_options()
        ("f,file", "Text file to score", cxxopts::value<std::string>())
        ("c,ctx-size", "Tokens per chunk", cxxopts::value<int>()->default_value("512"))
        ("chunks", "Score only the first N chunks (-1 = all)", cxxopts::value<int>()->default_value("-1"))
        ("kl-divergence-base", "Save the scored log-probabilities to FILE (alone), or compare with them "
                               "(with --kl-divergence)", cxxopts::value<std::string>())
        ("kl-divergence", "Compare this model with --kl-divergence-base FILE: KL divergence, same top token, "
                          "delta p (the text, -c and chunks come from the file)");
    const auto args = parse_args(options, argc, argv);
    if (!args.count("model")) throw Error("missing -m/--model DIR (see --help)");
    const bool compare = args.count("kl-divergence") > 0;
    const std::string base_path = args.count("kl-divergence-base") ? args["kl-divergence-base"].as<std::string>() : "";
    if (compare && base_path.empty()) throw Error("--kl-divergence needs --kl-divergence-base FILE (see --help)");
    if (!compare && !args.count("file")) throw Error("missing -f/--file FILE (see --help)");
    apply_thread_option(args);
    int n_ctx = args["ctx-size"].as<int>();
    if (n_ctx < 4) throw Error("--ctx-size must be at least 4");
    const int max_chunks = args["chunks"].as<int>();
    if (max_chunks == 0 || max_chunks < -1) throw Error("--chunks must be -1 (all) or >= 1");
    // Flags checked before any work: the whole text is tokenized before the model loads.
    const std::string device = args["device"].as<std::string>();
    check_backend(backend_name_for(device));
    const BackendOptions backend = backend_options(args);

    // The text (or the base file) is read and checked before the model and its KV cache are
    // allocated; a base to be written is opened first of all.
    std::optional<KldBaseWriter> writer;
    if (!compare && !base_path.empty()) {
      install_interrupt_handlers();  // from here Ctrl-C leaves no partial base behind
      writer.emplace(base_path);
    }
    const std::string model_dir = args["model"].as<std::string>();
    const PackedCheckpoint checkpoint = load_packed_checkpoint(model_dir);
    std::unique_ptr<KldBaseReader> base;
    std::vector<int> tokens;
    int n_chunks = 0;
    if (compare) {
      base = std::make_unique<KldBaseReader>(base_path);
      if (base->header().n_vocab != checkpoint.config.vocab_size)
        fail(base_path, "holds a vocabulary of " + std::to_string(base->header().n_vocab) + "; the model " +
                            model_dir + " has " + std::to_string(checkpoint.config.vocab_size));
      if (args.count("file")) std::fprintf(stderr, "warning: -f is ignored with --kl-divergence (the base file holds the tokens)\n");
      if (args.count("ctx-size") && n_ctx != base->header().n_ctx)
        std::fprintf(stderr, "warning: -c %d is ignored; the base file was made with -c %d\n", n_ctx, base->header().n_ctx);
      n_ctx = base->header().n_ctx;
      n_chunks = base->header().n_chunks;
    } else {
      const std::string path = args["file"].as<std::string>();
      const std::string text = read_text_file(path);
      const Tokenizer tokenizer = load_checkpoint_tokenizer(checkpoint, model_dir);
      std::fprintf(stderr, "perplexity: tokenizing the input ..\n");
      const double start = now_seconds();
      tokens = tokenizer.encode(text, /*add_bos=*/true);
      throw_if_interrupted("tokenizing");
      std::fprintf(stderr, "perplexity: tokenization took %.1f ms, %zu tokens\n", (now_seconds() - start) * 1e3,
                   tokens.size());
      if (int64_t(tokens.size()) < 2 * int64_t(n_ctx))
        fail(path, "has " + std::to_string(tokens.size()) + " tokens; need at least " + std::to_string(2 * int64_t(n_ctx)) +
                       " for --ctx-size " + std::to_string(n_ctx));
      n_chunks = int(tokens.size()) / n_ctx;
    }
    if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);

    LoadedModel loaded = load_model(model_dir, device, n_ctx, /*need_tokenizer=*/!compare, backend);
    throw_if_interrupted("loading the model");
    std::fprintf(stderr, "perplexity: calculating perplexity over %d chunks, n_ctx=%d, backend=%s\n",
                 n_chunks, n_ctx, loaded.backend->name().c_str());

    const int vocab = loaded.checkpoint.config.vocab_size;
    const int first_scored = n_ctx / 2;
    if (writer) writer->begin(KldBaseHeader{n_ctx, vocab, n_chunks, first_scored});
    KldStatistics statistics;
    double nll_sum = 0, nll_squared_sum = 0;
    long scored = 0;
    std::vector<int> ids;             // [n_ctx]
    std::vector<float> logits;        // [n_ctx, vocab]
    std::vector<float> base_log_probs;  // [n_ctx - 1 - first_scored, vocab]
    std::vector<double> nll(size_t(n_ctx - 1 - first_scored));  // [n_ctx - 1 - first_scored]
    const double start = now_seconds();
    for (int chunk = 0; chunk < n_chunks; ++chunk) {
      throw_if_interrupted("saving the kl-divergence base");  // only with the handlers installed
      if (compare) {
        base->read_chunk(chunk, &ids, &base_log_probs);
      } else {
        ids.assign(tokens.begin() + long(chunk) * n_ctx, tokens.begin() + long(chunk + 1) * n_ctx);
        ids[0] = loaded.tokenizer->bos_id();
      }
      loaded.model->forward(ids, 0, /*all_logits=*/true, logits);
      // logits at position j predict token j + 1: -log p(next token) of each scored position,
      // the rows spread over the threads and summed in order below (the same result at any
      // thread count). One thread scoring 255 rows of 32000 logits took longer than the
      // H100's forward of the 25M-parameter model.
#pragma omp parallel for schedule(static)
      for (int j = first_scored; j < n_ctx - 1; ++j) {
        const float* row = &logits[size_t(j) * vocab];
        nll[size_t(j - first_scored)] = log_sum_exp(row, vocab) - double(row[ids[j + 1]]);
      }
      for (int j = first_scored; j < n_ctx - 1; ++j) {
        const double value = nll[size_t(j - first_scored)];
        // A NaN or inf here (damaged weights, an fp16 overflow) would only print "PPL = nan".
        if (!std::isfinite(value))
          fail(model_dir, "the model's logits are not finite in chunk " + std::to_string(chunk + 1) +
                              " at position " + std::to_string(j) + " (NaN or inf in its weights or activations?)");
        nll_sum += value;
        nll_squared_sum += value * value;
        ++scored;
        if (compare)
          statistics.add(&base_log_probs[size_t(j - first_scored) * vocab], &logits[size_t(j) * vocab], vocab,
                         ids[j + 1]);
      }
      if (writer) writer->add_chunk(ids, logits);
      if (chunk == 0) {
        const double seconds = now_seconds() - start;
        std::fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", seconds,
                     seconds * n_chunks / 60.0);
      }
      std::printf("[%d]%.4f,", chunk + 1, std::exp(nll_sum / scored));
      std::fflush(stdout);
    }
    if (writer) writer->finish();
    // llama.cpp's estimate: PPL = exp(mean nll), error = PPL * standard error of the mean.
    const double mean = nll_sum / scored;
    const double variance = nll_squared_sum / scored - mean * mean;
    const double standard_error = scored > 1 && variance > 0 ? std::sqrt(variance / (scored - 1)) : 0;
    const double ppl = std::exp(mean);
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, standard_error * ppl);
    std::fflush(stdout);  // before the stderr line, so that a shared log keeps the order
    const double seconds = now_seconds() - start;
    std::fprintf(stderr, "perplexity: %d chunks of %d tokens in %.2f s, %.0f tokens/s\n", n_chunks, n_ctx, seconds,
                 double(n_chunks) * n_ctx / seconds);
    if (writer) std::fprintf(stderr, "perplexity: saved the scored log-probabilities to %s\n", base_path.c_str());
    if (compare) {
      std::printf("\n");
      statistics.print(stdout);
    }
    return 0;
  });
}
