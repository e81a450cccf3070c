// The whole CPU pipeline on a real checkpoint: llama2.c stories260K -> packed checkpoint
// (f32, f16) -> saved and loaded -> greedy generation must reproduce the reference ids
// published with the model (../shared/models/README.md), which came from llama2.c itself.
// Greedy ids are a coarse check: a small numeric error (RMSNorm's epsilon dropped, an
// attention scale of 1 / sqrt(hd + 1): an audit's mutants) keeps every argmax here. The
// numeric checks of the CPU reference are HfRoundTrip.CpuForwardMatchesFloat64Reference and
// the logits / perplexity / KL-divergence program tests.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/import_llama2c.h"
#include "models/llama_model.h"
#include "models/quantize_model.h"
#include "runtime/cpu/cpu_backend.h"
#include "tokenizer/tokenizer.h"
#include "tests/cpu/test_files.h"

namespace gemlite {
namespace {

const std::vector<int> kReferenceIds = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315,
                                        421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408,
                                        419, 292, 411, 322, 265, 282, 295, 433, 426, 385};

// Feeds BOS and the forced prompt ids one position at a time, then argmax, until
// `positions` positions are filled; returns every id after BOS.
std::vector<int> greedy_ids(LlamaModel& model, const std::vector<int>& prompt, int positions) {
  std::vector<int> ids;
  std::vector<float> logits;
  int token = 1;  // BOS
  for (int pos = 0; pos < positions - 1; ++pos) {
    model.forward({token}, pos, false, logits);
    if (pos < int(prompt.size())) {
      token = prompt[pos];
    } else {
      token = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    ids.push_back(token);
  }
  return ids;
}

class Stories260kReference : public ::testing::TestWithParam<std::string> {
 protected:
  const PackedCheckpoint& checkpoint_for_test() const { return checkpoint_; }
  LlamaModel& model() {
    if (!model_) {
      const SourceModel source = load_llama2c(shared_file("models/stories260K/stories260K.bin"));
      QuantizeSpec spec;
      spec.format = WeightFormat::parse(GetParam());
      const std::string dir = make_temp_dir() + "/stories260K-" + GetParam();
      save_packed_checkpoint(quantize_model(source, spec), dir);
      checkpoint_ = load_packed_checkpoint(dir);
      backend_ = make_cpu_backend();
      model_ = std::make_unique<LlamaModel>(checkpoint_, *backend_);
    }
    return *model_;
  }

 private:
  PackedCheckpoint checkpoint_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
};

TEST_P(Stories260kReference, GreedyWithoutPromptMatchesReferenceIds) {
  const std::vector<int> ids = greedy_ids(model(), {}, 33);
  EXPECT_EQ(ids, kReferenceIds);
}

// The prompt through the tokenizer and one prefill call: "Once upon a time" encodes (with
// BOS, tok512.model) to BOS and the first four reference ids, which greedy decoding picks
// anyway, so after prefilling them in one forward call the continuation is the reference's.
TEST_P(Stories260kReference, PromptOnceUponATimeContinuesLikeTheReference) {
  const Tokenizer tokenizer = Tokenizer::load(shared_file("models/stories260K/tok512.model"));
  const std::vector<int> prompt = tokenizer.encode("Once upon a time", true);
  const std::vector<int> expected_prompt = {1, 403, 407, 261, 378};
  ASSERT_EQ(prompt, expected_prompt);
  std::vector<float> logits;
  model().forward(prompt, 0, false, logits);  // the last position's logits
  std::vector<int> ids(prompt.begin() + 1, prompt.end());
  for (int pos = int(prompt.size()); ids.size() < kReferenceIds.size(); ++pos) {
    const int token = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ids.push_back(token);
    model().forward({token}, pos, false, logits);
  }
  EXPECT_EQ(ids, kReferenceIds);
}

TEST_P(Stories260kReference, PrefillInOneCallEqualsTokenByTokenDecode) {
  std::vector<int> prompt = {1};
  prompt.insert(prompt.end(), kReferenceIds.begin(), kReferenceIds.end());
  std::vector<float> batched, stepped;
  model().forward(prompt, 0, false, batched);
  for (size_t pos = 0; pos < prompt.size(); ++pos) model().forward({prompt[pos]}, int(pos), false, stepped);
  ASSERT_EQ(batched.size(), stepped.size());
  for (size_t i = 0; i < batched.size(); ++i) EXPECT_NEAR(batched[i], stepped[i], 1e-4f) << i;
}

// A prompt longer than the model's chunk runs as several forwards: chunks of 7 (33 = 4 x 7
// + 5) give the logits of one 33-token chunk, every position (all_logits) and the last one
// (the workspace keeps only the last chunk's rows). The CPU computes each row alone, so
// the same values up to summation order: 1e-4 as above.
TEST_P(Stories260kReference, PromptInChunksEqualsOneChunk) {
  std::vector<int> prompt = {1};
  prompt.insert(prompt.end(), kReferenceIds.begin(), kReferenceIds.end());
  LlamaModel& whole_model = model();  // loads the checkpoint
  LlamaModel chunked(checkpoint_for_test(), whole_model.backend(), 0, /*max_chunk=*/7);
  ASSERT_EQ(chunked.max_chunk(), 7);
  std::vector<float> whole, pieces, last;
  whole_model.forward(prompt, 0, true, whole);
  chunked.forward(prompt, 0, true, pieces);
  ASSERT_EQ(whole.size(), pieces.size());
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(whole[i], pieces[i], 1e-4f) << i;
  chunked.forward(prompt, 0, false, last);
  const std::vector<float> last_row(whole.end() - last.size(), whole.end());
  for (size_t i = 0; i < last.size(); ++i) ASSERT_NEAR(last[i], last_row[i], 1e-4f) << i;
}

INSTANTIATE_TEST_SUITE_P(Formats, Stories260kReference, ::testing::Values("f32", "f16"));

}  // namespace
}  // namespace gemlite
