// A real Hugging Face checkpoint (bf16 safetensors in four shards, grouped-query
// attention 3:1, tied embeddings, transformers 5 config keys) converted and run on the
// CPU backend must continue "Once upon a time," exactly as transformers does (greedy
// reference ids in ../shared/models/README.md, fp32 compute on the bf16 weights).
// Greedy ids are a coarse check: a small numeric error (RMSNorm's epsilon dropped, an
// attention scale of 1 / sqrt(hd + 1): an audit's mutants) keeps every argmax here. The
// numeric checks of the CPU reference are HfRoundTrip.CpuForwardMatchesFloat64Reference and
// the logits / perplexity / KL-divergence program tests.
#include <gtest/gtest.h>

#include "models/import_hf.h"
#include "models/llama_model.h"
#include "models/quantize_model.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/cpu/test_files.h"

namespace gemlite {
namespace {

class GutenbergReference : public ::testing::TestWithParam<std::string> {};

TEST_P(GutenbergReference, GreedyContinuationMatchesTransformers) {
  QuantizeSpec spec;
  spec.format = WeightFormat::parse(GetParam());
  const std::string dir = make_temp_dir() + "/gutenberg";
  save_packed_checkpoint(quantize_model(load_hf_directory(shared_file("models/gutenberg-llama-25m")), spec), dir);
  const PackedCheckpoint ckpt = load_packed_checkpoint(dir);
  auto backend = make_cpu_backend();
  LlamaModel model(ckpt, *backend, 64);

  const std::vector<int> prompt = {1, 9038, 2501, 263, 931, 29892};  // BOS "Once upon a time,"
  const std::vector<int> expected = {322, 769, 29892, 411, 263, 13, 29888, 809,
                                     3838, 310, 15331, 29892, 540, 1497, 29901, 13};
  std::vector<float> logits;
  model.forward(prompt, 0, false, logits);
  std::vector<int> generated;
  for (size_t i = 0; i < expected.size(); ++i) {
    const int id = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
    generated.push_back(id);
    model.forward({id}, int(prompt.size() + i), false, logits);
  }
  EXPECT_EQ(generated, expected);
}

// bf16 keeps the checkpoint's own weights; f32 widens them exactly.
INSTANTIATE_TEST_SUITE_P(LosslessFormats, GutenbergReference, ::testing::Values("bf16", "f32"));

}  // namespace
}  // namespace gemlite
