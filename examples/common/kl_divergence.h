#pragma once
// llama-perplexity's --kl-divergence-base / --kl-divergence: how far a quantized model's
// next-token distributions are from a reference model's on the same text. A first run
// (usually the f16/bf16 model) saves the log-probabilities of every scored position; a
// second run (the quantized model) compares its own with them, token by token.
//
// The base file is gemlite's own (llama.cpp's is not read): all little-endian,
//   magic "GEMLITE-KLD-v1\0\0" (16 bytes), int32 n_ctx, n_vocab, n_chunks, first_scored,
//   then per chunk: int32 ids [n_ctx] (as fed: ids[0] = BOS), and fp16 log-probabilities
//   [n_ctx - 1 - first_scored, n_vocab] of positions first_scored .. n_ctx - 2 (position j
//   predicts ids[j + 1]).
// fp16 keeps a log-probability to 2^-11 of its size: for the tokens that carry the
// probability mass (log p > -8) that is < 4e-3 nats, far below the KLD of any 8-bit or
// lower format measured (README).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/io/output_file.h"

namespace gemlite {

// ln sum_i exp(logits[i]) over logits [n], in double so 32000-way sums keep their
// precision: log p(i) = logits[i] - log_sum_exp (perplexity and the statistics below).
double log_sum_exp(const float* logits, int n);

struct KldBaseHeader {
  int32_t n_ctx = 0, n_vocab = 0, n_chunks = 0, first_scored = 0;
  int64_t scored_per_chunk() const { return n_ctx - 1 - first_scored; }
  int64_t chunk_bytes() const;
};

// Writes through an AtomicFile (runtime/io/output_file.h): renamed into place in finish(); a
// writer destroyed before that removes the temporary, so a failed or interrupted run
// leaves nothing that looks like a base. Opened first (before any slow work), so an
// unwritable path is the run's first and only complaint. Replaces only an earlier base.
class KldBaseWriter {
 public:
  explicit KldBaseWriter(const std::string& path);
  KldBaseWriter(const KldBaseWriter&) = delete;
  KldBaseWriter& operator=(const KldBaseWriter&) = delete;

  void begin(const KldBaseHeader& header);
  // ids [n_ctx] as fed, logits [n_ctx, n_vocab] of that chunk.
  void add_chunk(const std::vector<int>& ids, const std::vector<float>& logits);
  void finish();  // Error naming the file when the chunks written are not n_chunks

 private:
  KldBaseHeader header_;
  AtomicFile file_;
  int written_ = 0;
};

// Checks the header and the file's size against it (Error naming the file otherwise).
class KldBaseReader {
 public:
  explicit KldBaseReader(const std::string& path);
  const KldBaseHeader& header() const { return header_; }
  // Chunk `index`: ids [n_ctx] and log-probabilities [scored_per_chunk, n_vocab] (floats).
  void read_chunk(int index, std::vector<int>* ids, std::vector<float>* log_probs);

 private:
  std::string path_;
  KldBaseHeader header_;
  std::ifstream in_;
};

// Per-token statistics of a quantized model (Q) against the base, printed like
// llama-perplexity's --kl-divergence summary.
class KldStatistics {
 public:
  // One scored position: the base's log-probabilities [n_vocab], Q's logits [n_vocab], and
  // the token that came next.
  void add(const float* base_log_probs, const float* logits, int n_vocab, int target);
  int64_t count() const { return int64_t(kld_.size()); }
  double mean_kld() const;
  double same_top_fraction() const;
  double mean_log_ppl_ratio() const;  // mean of ln p_base(target) - ln p_Q(target)
  void print(std::FILE* out) const;

 private:
  std::vector<double> kld_;                // per token
  std::vector<double> nll_q_, nll_base_;   // -ln p(target)
  std::vector<double> delta_p_;            // p_Q(target) - p_base(target)
  int64_t same_top_ = 0;
};

}  // namespace gemlite
