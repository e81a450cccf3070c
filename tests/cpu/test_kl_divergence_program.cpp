// gemlite-perplexity --kl-divergence-base / --kl-divergence (llama-perplexity's flags):
// the saved base compared with itself is (nearly) zero, the mean KLD of a quantized model
// equals an independent computation from both models' logits, fewer bits diverge more, and
// bad base files are one-line errors that name the file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/llama_model.h"
#include "runtime/dtype.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/cpu/program_runner.h"
#include "tokenizer/tokenizer.h"

namespace gemlite {
namespace {

const char* kText = "data/tinystories/tinystories_sample.txt";
constexpr int kContext = 128;

// The base file of stories260K f32 over the first `chunks` chunks (made once per chunk count).
const std::string& base_file(int chunks) {
  static std::map<int, std::string> made;
  auto found = made.find(chunks);
  if (found != made.end()) return found->second;
  const std::string path = make_temp_dir() + "/base-" + std::to_string(chunks) + ".kld";
  const ProgramRun run = run_program_for_test(
      "gemlite-perplexity", "--device cpu -m " + quantized_stories260k("f32") + " -f " + shared_file(kText) + " -c " +
                                std::to_string(kContext) + " --chunks " + std::to_string(chunks) +
                                " --kl-divergence-base " + path,
      false);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(std::filesystem::is_regular_file(path));
  EXPECT_TRUE(leftovers_beside(path).empty());  // renamed into place
  return made.emplace(chunks, path).first->second;
}

// A number printed after `label` in the program's output (NaN when absent).
double value_after(const std::string& output, const std::string& label) {
  const size_t at = output.find(label);
  if (at == std::string::npos) return NAN;
  return std::stod(output.substr(at + label.size()));
}

std::string compare_with_base(const std::string& format, int chunks) {
  const ProgramRun run = run_program_for_test(
      "gemlite-perplexity",
      "--device cpu -m " + quantized_stories260k(format) + " --kl-divergence-base " + base_file(chunks) + " --kl-divergence",
      false);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return run.output;
}

TEST(KlDivergenceProgram, TheBaseAgainstItselfIsZero) {
  const std::string output = compare_with_base("f32", 4);
  // Only the fp16 rounding of the saved log-probabilities separates the two.
  EXPECT_LT(std::fabs(value_after(output, "Mean    KLD:")), 1e-4) << output;
  EXPECT_LT(value_after(output, "Maximum KLD:"), 2e-3) << output;
  EXPECT_EQ(value_after(output, "Same top p:"), 100.0) << output;
  EXPECT_LT(std::fabs(value_after(output, "Mean ln(PPL(Q)/PPL(base))     :")), 1e-3) << output;
}

// llama-perplexity's ratio line: the quotient of the two perplexities printed above it.
TEST(KlDivergenceProgram, ThePerplexityRatioIsTheQuotientOfTheTwo) {
  const std::string output = compare_with_base("q4g64", 2);
  const double ratio = value_after(output, "Mean PPL(Q)/PPL(base)         :");
  const double quotient = value_after(output, "Mean PPL(Q)                   :") /
                          value_after(output, "Mean PPL(base)                :");
  EXPECT_NEAR(ratio, quotient, 2e-6 * quotient + 1e-6) << output;  // both printed to 6 decimals
  EXPECT_GT(ratio, 1.0) << output;  // q4g64 is worse than its f32 base on the same tokens
}

// Mean over the scored positions of the first chunk of sum_i p_f32(i) ln(p_f32(i) / p_q4(i)),
// from both models' full-precision logits in this process.
TEST(KlDivergenceProgram, MeanKldEqualsAnIndependentComputation) {
  const std::string output = compare_with_base("q4g64", 1);
  std::ifstream in(shared_file(kText));
  std::stringstream text;
  text << in.rdbuf();
  const Tokenizer tokenizer = Tokenizer::load(quantized_stories260k("f32") + "/tokenizer.model");
  std::vector<int> ids = tokenizer.encode(text.str(), true);
  ids.resize(kContext);
  ids[0] = tokenizer.bos_id();
  std::vector<float> base_logits, q_logits;  // [kContext, vocab]
  for (const auto& [format, logits] : {std::pair{"f32", &base_logits}, std::pair{"q4g64", &q_logits}}) {
    const PackedCheckpoint ckpt = load_packed_checkpoint(quantized_stories260k(format));
    auto backend = make_cpu_backend();
    LlamaModel model(ckpt, *backend, kContext);
    model.forward(ids, 0, /*all_logits=*/true, *logits);
  }
  const int vocab = int(base_logits.size() / kContext);
  const auto log_softmax = [&](const float* row) {
    double max = row[0], sum = 0;
    for (int i = 1; i < vocab; ++i) max = std::max(max, double(row[i]));
    for (int i = 0; i < vocab; ++i) sum += std::exp(row[i] - max);
    std::vector<double> out(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) out[size_t(i)] = row[i] - max - std::log(sum);
    return out;
  };
  double total = 0;
  int count = 0;
  for (int j = kContext / 2; j < kContext - 1; ++j, ++count) {
    const std::vector<double> p = log_softmax(&base_logits[size_t(j) * vocab]);
    const std::vector<double> q = log_softmax(&q_logits[size_t(j) * vocab]);
    for (int i = 0; i < vocab; ++i) total += std::exp(p[size_t(i)]) * (p[size_t(i)] - q[size_t(i)]);
  }
  const double want = total / count, got = value_after(output, "Mean    KLD:");
  EXPECT_GT(want, 1e-3);  // a real divergence, not a zero that anything would match
  EXPECT_NEAR(got, want, 2e-3 * want + 1e-5) << output;
}

TEST(KlDivergenceProgram, FewerBitsDivergeMoreAndAgreeLessOnTheTopToken) {
  const std::string q8 = compare_with_base("q8", 4), q4 = compare_with_base("q4g64", 4),
                    q2 = compare_with_base("q2g64", 4);
  EXPECT_LT(value_after(q8, "Mean    KLD:"), value_after(q4, "Mean    KLD:"));
  EXPECT_LT(value_after(q4, "Mean    KLD:"), value_after(q2, "Mean    KLD:"));
  EXPECT_GT(value_after(q8, "Same top p:"), value_after(q4, "Same top p:"));
  EXPECT_GT(value_after(q4, "Same top p:"), value_after(q2, "Same top p:"));
}

TEST(KlDivergenceProgram, BadBaseFilesAreOneLineErrorsNamingTheFile) {
  const std::string model = "--device cpu -m " + quantized_stories260k("q8");
  const auto expect_error = [&](const std::string& arguments, const std::string& expected) {
    const ProgramRun run = run_program_for_test("gemlite-perplexity", arguments, /*only_stderr=*/true);
    EXPECT_EQ(run.exit_code, 1) << arguments << "\n" << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
    EXPECT_NE(run.output.find(expected), std::string::npos) << "expected '" << expected << "' in: " << run.output;
  };
  expect_error(model + " --kl-divergence", "--kl-divergence-base");
  const std::string dir = make_temp_dir();
  expect_error(model + " --kl-divergence --kl-divergence-base " + dir + "/missing.kld", dir + "/missing.kld");

  const std::string truncated = dir + "/truncated.kld";
  std::filesystem::copy_file(base_file(4), truncated);
  std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) - 100);
  expect_error(model + " --kl-divergence --kl-divergence-base " + truncated, "truncated");

  // A NaN log-probability (fp16 0x7e00), the first of chunk 1's: refused with the file
  // named (it printed NaN statistics and exited 0), after perplexity's progress lines.
  const std::string with_nan = dir + "/with-nan.kld";
  std::filesystem::copy_file(base_file(4), with_nan);
  {
    std::fstream file(with_nan, std::ios::binary | std::ios::in | std::ios::out);
    int32_t n_ctx = 0;
    file.seekg(16);
    file.read(reinterpret_cast<char*>(&n_ctx), 4);
    file.seekp(32 + std::streamoff(n_ctx) * 4);  // magic, 4 header fields, the chunk's ids
    const unsigned char nan_half[2] = {0x00, 0x7e};
    file.write(reinterpret_cast<const char*>(nan_half), 2);
  }
  const ProgramRun nan_run = run_program_for_test(
      "gemlite-perplexity", model + " --kl-divergence --kl-divergence-base " + with_nan, /*only_stderr=*/true);
  EXPECT_EQ(nan_run.exit_code, 1) << nan_run.output;
  EXPECT_NE(nan_run.output.find(with_nan + ": chunk 1 holds the log-probability nan"), std::string::npos) << nan_run.output;

  // Rows that are no distribution (both had printed "Mean PPL(base): inf" and exited 0): chunk
  // 1's first scored row all -inf, and the token that follows a row set to -inf, in the first
  // row where that token's probability is below 0.5 %, so that the row still sums to ~1 and
  // only the check of the next token can see it. Returns the damaged row (1-based).
  const auto damage = [&](const std::string& path, bool whole_row) {
    std::filesystem::copy_file(base_file(4), path);
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    int32_t header[4] = {};  // n_ctx, n_vocab, n_chunks, first_scored
    file.seekg(16);
    file.read(reinterpret_cast<char*>(header), sizeof header);
    std::vector<int32_t> ids(static_cast<size_t>(header[0]));
    file.read(reinterpret_cast<char*>(ids.data()), std::streamsize(ids.size() * 4));
    std::vector<uint16_t> halves(static_cast<size_t>(header[1]));  // one scored row
    for (int r = 0; r < header[0] - 1 - header[3]; ++r) {
      const std::streamoff row = 32 + std::streamoff(header[0]) * 4 + std::streamoff(r) * header[1] * 2;
      const int next = ids[size_t(header[3] + r + 1)];
      file.seekg(row);
      file.read(reinterpret_cast<char*>(halves.data()), std::streamsize(halves.size() * 2));
      if (!whole_row && std::exp(half_to_float(halves[size_t(next)])) >= 0.005) continue;
      for (size_t v = 0; v < halves.size(); ++v)
        if (whole_row || int(v) == next) halves[v] = 0xFC00;  // fp16 -inf
      file.seekp(row);
      file.write(reinterpret_cast<const char*>(halves.data()), std::streamsize(halves.size() * 2));
      return r + 1;
    }
    ADD_FAILURE() << "no row of chunk 1 gives its next token under 0.5 %";
    return 0;
  };
  // Read chunk by chunk, so refused after perplexity's progress lines, as the NaN above.
  const auto expect_refused = [&](const std::string& path, int row, const std::string& expected) {
    const ProgramRun run =
        run_program_for_test("gemlite-perplexity", model + " --kl-divergence --kl-divergence-base " + path, true);
    EXPECT_EQ(run.exit_code, 1) << run.output;
    const std::string line = path + ": chunk 1, scored position " + std::to_string(row) + ": " + expected;
    EXPECT_NE(run.output.find(line), std::string::npos) << "expected '" << line << "' in: " << run.output;
    EXPECT_EQ(run.output.find("PPL"), std::string::npos) << run.output;
  };
  const std::string inf_row = dir + "/inf-row.kld", inf_next = dir + "/inf-next.kld";
  expect_refused(inf_row, damage(inf_row, true), "the probabilities sum to 0");
  expect_refused(inf_next, damage(inf_next, false), "the next token");

  const std::string other_vocab = dir + "/other-vocab.kld";  // a well-formed header for a 1000-token vocabulary
  {
    std::ofstream out(other_vocab, std::ios::binary);
    const char magic[16] = "GEMLITE-KLD-v1";
    const int32_t fields[4] = {8, 1000, 1, 4};  // n_ctx, n_vocab, n_chunks, first_scored
    out.write(magic, sizeof magic);
    out.write(reinterpret_cast<const char*>(fields), sizeof fields);
    const std::vector<char> chunk(8 * 4 + 3 * 1000 * 2, 0);
    out.write(chunk.data(), std::streamsize(chunk.size()));
  }
  expect_error(model + " --kl-divergence --kl-divergence-base " + other_vocab, "vocabulary of 1000");
  // A header whose scored half is not llama-perplexity's (n_ctx / 2) would be read out of
  // bounds: refused.
  const std::string other_half = dir + "/other-half.kld";
  {
    std::ofstream out(other_half, std::ios::binary);
    const char magic[16] = "GEMLITE-KLD-v1";
    const int32_t fields[4] = {8, 512, 1, 6};  // n_ctx, n_vocab, n_chunks, first_scored (not 4)
    out.write(magic, sizeof magic);
    out.write(reinterpret_cast<const char*>(fields), sizeof fields);
    const std::vector<char> chunk(8 * 4 + 1 * 512 * 2, 0);
    out.write(chunk.data(), std::streamsize(chunk.size()));
  }
  expect_error(model + " --kl-divergence --kl-divergence-base " + other_half, "corrupt header");
  expect_error(model + " --kl-divergence --kl-divergence-base /etc/hostname", "not a gemlite KL-divergence base");

  // A run that fails after opening the base leaves neither it nor its temporary file.
  const std::string short_text_base = dir + "/short.kld";
  const ProgramRun short_text = run_program_for_test(
      "gemlite-perplexity", model + " -f " + shared_file(kText) + " -c 100000 --kl-divergence-base " + short_text_base,
      /*only_stderr=*/true);  // after perplexity's progress lines on stderr
  EXPECT_EQ(short_text.exit_code, 1) << short_text.output;
  EXPECT_NE(short_text.output.find("tinystories_sample.txt: has"), std::string::npos) << short_text.output;
  EXPECT_FALSE(std::filesystem::exists(short_text_base));
  EXPECT_TRUE(leftovers_beside(short_text_base).empty());

  // A base that cannot be written is named, and nothing is left behind.
  expect_error(model + " -f " + shared_file(kText) + " -c 128 --chunks 1 --kl-divergence-base " + dir +
                   "/no/such/dir/base.kld",
               dir + "/no/such/dir/base.kld.tmp");
  // Only an earlier base is replaced: not the text being read, nor any other file.
  const std::string text_copy = dir + "/text.txt";
  std::filesystem::copy_file(shared_file(kText), text_copy);
  expect_error(model + " -f " + text_copy + " -c 128 --chunks 1 --kl-divergence-base " + text_copy,
               "is not a gemlite KL-divergence base: not replaced");
  EXPECT_EQ(std::filesystem::file_size(text_copy), std::filesystem::file_size(shared_file(kText)));
  const std::string earlier = dir + "/earlier.kld";
  std::filesystem::copy_file(base_file(4), earlier);
  const ProgramRun replaced = run_program_for_test(
      "gemlite-perplexity", model + " -f " + shared_file(kText) + " -c 128 --chunks 1 --kl-divergence-base " + earlier,
      true);
  EXPECT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_LT(std::filesystem::file_size(earlier), std::filesystem::file_size(base_file(4)));  // 1 chunk now, not 4
  // A base path that is a directory is refused before the run (it failed after all chunks).
  std::filesystem::create_directory(dir + "/a-folder");
  expect_error(model + " -f " + shared_file(kText) + " -c 128 --chunks 1 --kl-divergence-base " + dir + "/a-folder",
               "not a regular file");
}

}  // namespace
}  // namespace gemlite
