#include "examples/common/kl_divergence.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/io/output_file.h"
#include "runtime/io/readable_file.h"

namespace gemlite {
namespace {

constexpr char kMagic[16] = "GEMLITE-KLD-v1";  // 14 characters, zero-padded to 16

// log softmax(logits) [n] in double.
void log_softmax(const float* logits, int n, std::vector<double>* out) {
  out->resize(size_t(n));
  const double log_sum = log_sum_exp(logits, n);
  for (int i = 0; i < n; ++i) (*out)[size_t(i)] = double(logits[i]) - log_sum;
}

// Mean and its standard error.
std::pair<double, double> mean_and_error(const std::vector<double>& v) {
  if (v.empty()) return {0, 0};
  double sum = 0, squares = 0;
  for (double x : v) sum += x, squares += x * x;
  const double n = double(v.size()), mean = sum / n;
  const double variance = std::max(0.0, squares / n - mean * mean);
  return {mean, v.size() > 1 ? std::sqrt(variance / (n - 1)) : 0.0};
}

}  // namespace

double log_sum_exp(const float* logits, int n) {
  const float max_logit = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - max_logit);
  return max_logit + std::log(sum);
}

int64_t KldBaseHeader::chunk_bytes() const {
  return int64_t(n_ctx) * 4 + scored_per_chunk() * n_vocab * 2;
}

namespace {

// `path`, once it is known not to hold anything but an earlier base (check_replaceable_output;
// `-f text --kl-divergence-base text` would have replaced the text).
const std::string& replaceable_base(const std::string& path) {
  check_replaceable_output(path, "a gemlite KL-divergence base", [](const std::string& existing) {
    std::ifstream in(existing, std::ios::binary);
    char magic[sizeof kMagic] = {};
    in.read(magic, sizeof magic);
    return in && std::memcmp(magic, kMagic, sizeof kMagic) == 0;
  });
  return path;
}

}  // namespace

KldBaseWriter::KldBaseWriter(const std::string& path) : file_(replaceable_base(path)) {}

void KldBaseWriter::begin(const KldBaseHeader& header) {
  header_ = header;
  const int32_t fields[4] = {header.n_ctx, header.n_vocab, header.n_chunks, header.first_scored};
  file_.write(kMagic, sizeof kMagic);
  file_.write(fields, sizeof fields);
}

void KldBaseWriter::add_chunk(const std::vector<int>& ids, const std::vector<float>& logits) {
  if (int64_t(ids.size()) != header_.n_ctx || int64_t(logits.size()) != int64_t(header_.n_ctx) * header_.n_vocab)
    throw Error("kl-divergence base: a chunk of " + std::to_string(ids.size()) + " ids and " +
                std::to_string(logits.size()) + " logits");
  std::vector<int32_t> ids32(ids.begin(), ids.end());
  file_.write(ids32.data(), ids32.size() * 4);
  std::vector<double> row;
  std::vector<uint16_t> halves(size_t(header_.n_vocab));
  for (int j = header_.first_scored; j < header_.n_ctx - 1; ++j) {
    log_softmax(&logits[size_t(j) * header_.n_vocab], header_.n_vocab, &row);
    for (size_t i = 0; i < halves.size(); ++i) halves[i] = float_to_half(float(row[i]));
    file_.write(halves.data(), halves.size() * 2);
  }
  ++written_;
}

void KldBaseWriter::finish() {
  if (written_ != header_.n_chunks)
    fail(file_.temp_path(), std::to_string(written_) + " of " + std::to_string(header_.n_chunks) + " chunks written");
  file_.commit();
}

KldBaseReader::KldBaseReader(const std::string& path) : path_(path) {
  require_readable_file(path);
  in_.open(path, std::ios::binary);
  char magic[sizeof kMagic] = {};
  int32_t fields[4] = {};
  in_.read(magic, sizeof magic);
  in_.read(reinterpret_cast<char*>(fields), sizeof fields);
  if (!in_ || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    fail(path, "not a gemlite KL-divergence base file (write one with --kl-divergence-base alone)");
  header_ = {fields[0], fields[1], fields[2], fields[3]};
  // first_scored is llama-perplexity's n_ctx / 2 (what the writer stores and the scorer
  // assumes); bounds on the others keep the size arithmetic below far from overflow.
  if (header_.n_ctx < 4 || header_.n_ctx > (1 << 24) || header_.n_vocab < 2 || header_.n_vocab > (1 << 24) ||
      header_.n_chunks < 1 || header_.n_chunks > (1 << 24) || header_.first_scored != header_.n_ctx / 2)
    fail(path, "corrupt header (n_ctx " + std::to_string(header_.n_ctx) + ", n_vocab " +
                   std::to_string(header_.n_vocab) + ", chunks " + std::to_string(header_.n_chunks) + ")");
  const auto expected = uintmax_t(sizeof kMagic + sizeof fields) + uintmax_t(header_.n_chunks) * header_.chunk_bytes();
  const uintmax_t size = std::filesystem::file_size(path);
  if (size != expected)
    fail(path, "is " + std::to_string(size) + " bytes; its header says " + std::to_string(expected) +
                   " (truncated or not a base file)");
}

void KldBaseReader::read_chunk(int index, std::vector<int>* ids, std::vector<float>* log_probs) {
  const int64_t offset = int64_t(sizeof kMagic + 16) + int64_t(index) * header_.chunk_bytes();
  in_.seekg(offset);
  std::vector<int32_t> ids32(size_t(header_.n_ctx));
  in_.read(reinterpret_cast<char*>(ids32.data()), std::streamsize(ids32.size() * 4));
  std::vector<uint16_t> halves(size_t(header_.scored_per_chunk() * header_.n_vocab));
  in_.read(reinterpret_cast<char*>(halves.data()), std::streamsize(halves.size() * 2));
  if (!in_) fail(path_, "read of chunk " + std::to_string(index + 1) + " failed");
  ids->assign(ids32.begin(), ids32.end());
  for (int id : *ids)
    if (id < 0 || id >= header_.n_vocab) fail(path_, "token id " + std::to_string(id) + " outside the vocabulary");
  log_probs->resize(halves.size());
  for (size_t i = 0; i < halves.size(); ++i) {
    const float log_prob = half_to_float(halves[i]);
    // <= 0 (-inf below fp16's range), up to the log-softmax's rounding: a NaN or a positive
    // value is damage, which would print NaN statistics.
    if (!(log_prob <= 1e-3f))
      fail(path_, "chunk " + std::to_string(index + 1) + " holds the log-probability " + std::to_string(log_prob) +
                      " (corrupt: log-probabilities are <= 0)");
    (*log_probs)[i] = log_prob;
  }
  // Each scored row is a distribution in which the token that follows has a probability: a
  // row of -inf, or the next token's set to -inf, had printed "Mean PPL(base): inf". The fp16
  // log-probabilities err by 2^-11 of their size, so a sum errs by at most ~2^-11 times the
  // row's entropy (< 0.01 for any vocabulary here); a real -inf is below -65504, which no
  // log-softmax of finite logits reaches for the next token.
  // The sums on all threads: an exp per log-probability, 33 M a chunk at n_ctx 512 and a
  // 128k vocabulary.
  const int64_t n_vocab = header_.n_vocab, rows = header_.scored_per_chunk();
  std::vector<double> sums(static_cast<size_t>(rows));  // [rows]
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = log_probs->data() + r * n_vocab;
    double sum = 0;
    for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(double(row[v]));
    sums[size_t(r)] = sum;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = log_probs->data() + r * n_vocab;  // [n_vocab] of position first_scored + r
    const std::string where = "chunk " + std::to_string(index + 1) + ", scored position " + std::to_string(r + 1);
    const double sum = sums[size_t(r)];
    if (!(std::abs(sum - 1) <= 0.02))
      fail(path_, where + ": the probabilities sum to " + std::to_string(sum) + " (corrupt: a distribution sums to 1)");
    const int next = (*ids)[size_t(header_.first_scored + r + 1)];
    if (std::isinf(row[next]))
      fail(path_, where + ": the next token " + std::to_string(next) + " has the log-probability -inf (corrupt)");
  }
}

void KldStatistics::add(const float* base_log_probs, const float* logits, int n_vocab, int target) {
  std::vector<double> q;
  log_softmax(logits, n_vocab, &q);
  double kld = 0;
  int top_base = 0, top_q = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const double p = std::exp(double(base_log_probs[i]));
    if (p > 0) kld += p * (double(base_log_probs[i]) - q[size_t(i)]);  // 0 ln 0 = 0 (an fp16 -inf)
    if (base_log_probs[i] > base_log_probs[top_base]) top_base = i;
    if (q[size_t(i)] > q[size_t(top_q)]) top_q = i;
  }
  kld_.push_back(kld);
  nll_q_.push_back(-q[size_t(target)]);
  nll_base_.push_back(-double(base_log_probs[target]));
  delta_p_.push_back(std::exp(q[size_t(target)]) - std::exp(double(base_log_probs[target])));
  same_top_ += top_base == top_q;
}

double KldStatistics::mean_kld() const { return mean_and_error(kld_).first; }
double KldStatistics::same_top_fraction() const { return count() ? double(same_top_) / double(count()) : 0.0; }
double KldStatistics::mean_log_ppl_ratio() const {
  std::vector<double> ratio(nll_q_.size());
  for (size_t i = 0; i < ratio.size(); ++i) ratio[i] = nll_q_[i] - nll_base_[i];
  return mean_and_error(ratio).first;
}

void KldStatistics::print(std::FILE* out) const {
  if (kld_.empty()) return;
  const auto [nll_q, nll_q_error] = mean_and_error(nll_q_);
  const auto [nll_base, nll_base_error] = mean_and_error(nll_base_);
  std::vector<double> ratio(nll_q_.size());
  for (size_t i = 0; i < ratio.size(); ++i) ratio[i] = nll_q_[i] - nll_base_[i];
  const auto [log_ratio, log_ratio_error] = mean_and_error(ratio);
  const auto [kld, kld_error] = mean_and_error(kld_);
  const auto [delta_p, delta_p_error] = mean_and_error(delta_p_);
  std::vector<double> sorted = kld_;
  std::sort(sorted.begin(), sorted.end());
  const auto quantile = [&](double q) { return sorted[size_t(std::lround(q * double(sorted.size() - 1)))]; };
  const double same = same_top_fraction(), n = double(count());
  const double same_error = n > 1 ? std::sqrt(same * (1 - same) / (n - 1)) : 0.0;
  std::fprintf(out, "====== Perplexity statistics ======\n");
  std::fprintf(out, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", std::exp(nll_q), std::exp(nll_q) * nll_q_error);
  std::fprintf(out, "Mean PPL(base)                : %10.6f ± %10.6f\n", std::exp(nll_base),
               std::exp(nll_base) * nll_base_error);
  std::fprintf(out, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", log_ratio, log_ratio_error);
  std::fprintf(out, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", std::exp(log_ratio),
               std::exp(log_ratio) * log_ratio_error);
  std::fprintf(out, "\n====== KL divergence statistics ======\n");
  std::fprintf(out, "Mean    KLD: %10.6f ± %10.6f\n", kld, kld_error);
  std::fprintf(out, "Maximum KLD: %10.6f\n", sorted.back());
  std::fprintf(out, "99.9%%   KLD: %10.6f\n", quantile(0.999));
  std::fprintf(out, "99.0%%   KLD: %10.6f\n", quantile(0.99));
  std::fprintf(out, "Median  KLD: %10.6f\n", quantile(0.5));
  std::fprintf(out, "Minimum KLD: %10.6f\n", sorted.front());
  std::fprintf(out, "\n====== Token probability statistics ======\n");
  std::fprintf(out, "Mean    Δp: %7.3f ± %5.3f %%\n", 100 * delta_p, 100 * delta_p_error);
  std::fprintf(out, "Same top p: %7.3f ± %5.3f %%\n", 100 * same, 100 * same_error);
}

}  // namespace gemlite
