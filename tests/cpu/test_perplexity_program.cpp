// gemlite-perplexity follows llama-perplexity's protocol. The test recomputes the number
// independently from the model's logits (whole text tokenized once with BOS, chunks of
// n_ctx, first token of each chunk replaced by BOS, second half scored) and checks that
// lower precision costs perplexity in the expected order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/llama_model.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/cpu/program_runner.h"
#include "tokenizer/tokenizer.h"

namespace gemlite {
namespace {

const char* kText = "data/tinystories/tinystories_sample.txt";

double program_ppl(const std::string& dir, int n_ctx, int chunks, std::string* progress = nullptr) {
  const ProgramRun run = run_program_for_test(
      "gemlite-perplexity",
      "-m " + dir + " -f " + shared_file(kText) + " -c " + std::to_string(n_ctx) + " --chunks " + std::to_string(chunks),
      false);
  EXPECT_EQ(run.exit_code, 0);
  if (progress) *progress = run.output;
  const size_t at = run.output.find("Final estimate: PPL = ");
  EXPECT_NE(at, std::string::npos) << run.output;
  return at == std::string::npos ? 0 : std::stod(run.output.substr(at + 22));
}

TEST(PerplexityProgram, MatchesAnIndependentComputationOfTheProtocol) {
  const std::string dir = quantized_stories260k("f32");
  const int n_ctx = 64, chunks = 3;
  std::string output;
  const double reported = program_ppl(dir, n_ctx, chunks, &output);
  EXPECT_EQ(output.rfind("[1]", 0), 0u) << output;
  EXPECT_NE(output.find(",[3]"), std::string::npos) << output;

  std::ifstream in(shared_file(kText));
  std::stringstream text;
  text << in.rdbuf();
  const Tokenizer tokenizer = Tokenizer::load(dir + "/tokenizer.model");
  const std::vector<int> tokens = tokenizer.encode(text.str(), true);
  const PackedCheckpoint ckpt = load_packed_checkpoint(dir);
  auto backend = make_cpu_backend();
  LlamaModel model(ckpt, *backend, n_ctx);
  double nll = 0;
  int count = 0;
  for (int c = 0; c < chunks; ++c) {
    std::vector<float> logits;  // one position at a time: [vocab]
    for (int j = 0; j < n_ctx - 1; ++j) {
      const int input = j == 0 ? tokenizer.bos_id() : tokens[c * n_ctx + j];
      model.forward({input}, j, false, logits);
      if (j < n_ctx / 2) continue;
      double sum = 0;
      for (float l : logits) sum += std::exp(double(l));
      nll += std::log(sum) - logits[tokens[c * n_ctx + j + 1]];
      ++count;
    }
  }
  EXPECT_NEAR(reported, std::exp(nll / count), 1e-3 * reported);
}

TEST(PerplexityProgram, FewerBitsCostPerplexityInOrder) {
  const double f32 = program_ppl(quantized_stories260k("f32"), 128, 4);
  const double f16 = program_ppl(quantized_stories260k("f16"), 128, 4);
  const double q8 = program_ppl(quantized_stories260k("q8"), 128, 4);
  const double q4 = program_ppl(quantized_stories260k("q4g32"), 128, 4);
  const double q2 = program_ppl(quantized_stories260k("q2g32"), 128, 4);
  EXPECT_NEAR(f16, f32, 0.002 * f32);
  EXPECT_LT(f32 * 0.99, q8);
  EXPECT_LT(q8, q4);
  EXPECT_LT(q4, q2);
}

// The scored rows are spread over the threads and summed in order: the printed numbers
// (every chunk's running value and the final estimate) are the same at any thread count.
TEST(PerplexityProgram, TheSameAtAnyThreadCount) {
  const std::string args = "-m " + quantized_stories260k("q4g32") + " -f " + shared_file(kText) + " -c 128 --chunks 4";
  const ProgramRun one = run_program_for_test("gemlite-perplexity", args + " -t 1", false);
  const ProgramRun two = run_program_for_test("gemlite-perplexity", args + " -t 2", false);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(one.output.find("Final estimate: PPL = "), std::string::npos) << one.output;
  EXPECT_EQ(one.output, two.output);
}

TEST(PerplexityProgram, TextShorterThanTwoChunksIsAnError) {
  const ProgramRun run = run_program_for_test(
      "gemlite-perplexity", "-m " + quantized_stories260k("f32") + " -f " + shared_file(kText) + " -c 100000", true);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("tinystories_sample.txt"), std::string::npos) << run.output;
}

// A bad --device or --dtype is refused before the text is tokenized (on WikiText-2 that had
// been seconds of work first): one line, and no "tokenizing" progress line before it.
TEST(PerplexityProgram, BadDeviceOrDtypeIsRefusedBeforeTokenizing) {
  const std::string args = "-m " + quantized_stories260k("q8") + " -f " + shared_file(kText);
  for (const auto& [flag, expected] : {std::pair{"--device gpu", "--device 'gpu'"}, std::pair{"--dtype fp8", "fp8"}}) {
    const ProgramRun run = run_program_for_test("gemlite-perplexity", args + " " + flag, /*only_stderr=*/true);
    EXPECT_EQ(run.exit_code, 1) << flag;
    EXPECT_NE(run.output.find(expected), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find("tokeniz"), std::string::npos) << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  }
}

// A checkpoint whose weights are NaN is one error line naming the model, not "Final
// estimate: PPL = nan" and exit 0. The NaN go into the embedding (every byte 0xff: NaN in
// f32), a big tensor the loader leaves unscanned; NaN norms are refused at load.
TEST(PerplexityProgram, NonFiniteLogitsAreAnError) {
  const std::string dir = make_temp_dir() + "/nan";
  std::filesystem::copy(quantized_stories260k("f32"), dir);
  const std::string tensors = dir + "/model.safetensors";
  std::fstream file(tensors, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_bytes = 0;  // little-endian length, then the JSON header
  file.read(reinterpret_cast<char*>(&header_bytes), 8);
  std::string header(header_bytes, ' ');
  file.read(header.data(), std::streamsize(header_bytes));
  const auto offsets = nlohmann::json::parse(header).at("model.embed_tokens.weight").at("data_offsets");
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  ASSERT_EQ(end - begin, uint64_t(512 * 64 * 4));  // [vocab, dim] F32
  file.seekp(std::streamoff(8 + header_bytes + begin));
  file << std::string(end - begin, '\xff');
  file.close();
  const ProgramRun run = run_program_for_test(
      "gemlite-perplexity", "-m " + dir + " -f " + shared_file(kText) + " -c 64 --chunks 1", true);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find(dir + ": the model's logits are not finite in chunk 1"), std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("Final estimate"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace gemlite
