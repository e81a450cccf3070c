// gemlite-logits saves the logits of every prompt position (the input of
// scripts/compare_transformers.py). Its rows are checked against the model run one token
// at a time through the KV cache, a different path through attention and the cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "models/llama_model.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/io/safetensors.h"
#include "tests/cpu/program_runner.h"
#include "tokenizer/tokenizer.h"

namespace gemlite {
namespace {

TEST(LogitsProgram, RowsEqualTheModelRunTokenByToken) {
  const std::string scratch = make_temp_dir();
  const std::string& model_dir = quantized_stories260k("f32");
  const std::vector<int> ids = {1, 403, 407, 261, 378, 30, 500, 2};
  const std::string file = scratch + "/logits.safetensors";
  const ProgramRun run = run_program_for_test(
      "gemlite-logits", "-m " + model_dir + " --device cpu --ids '1, 403,407 261,378,30,500,2' -o " + file, true);
  ASSERT_EQ(run.exit_code, 0) << run.output;

  const SafetensorsFile saved = SafetensorsFile::open(file);
  const HostTensor saved_ids = saved.get("ids");        // [T] I32
  const HostTensor saved_logits = saved.get("logits");  // [T, vocab] F32
  ASSERT_EQ(saved_ids.shape, (std::vector<int64_t>{int64_t(ids.size())}));
  EXPECT_EQ(std::vector<int>(saved_ids.as<int>(), saved_ids.as<int>() + ids.size()), ids);

  const PackedCheckpoint ckpt = load_packed_checkpoint(model_dir);
  const int vocab = ckpt.config.vocab_size;
  ASSERT_EQ(saved_logits.shape, (std::vector<int64_t>{int64_t(ids.size()), vocab}));
  auto backend = make_cpu_backend();
  LlamaModel model(ckpt, *backend, 64);
  std::vector<float> step;  // [vocab]
  for (size_t t = 0; t < ids.size(); ++t) {
    model.forward({ids[t]}, int(t), false, step);
    const float* row = saved_logits.as<float>() + t * vocab;
    float scale = 0, worst = 0;
    for (int i = 0; i < vocab; ++i) {
      scale = std::max(scale, std::abs(step[i]));
      worst = std::max(worst, std::abs(row[i] - step[i]));
    }
    // fp32 on both paths; only the order of the attention sums differs.
    EXPECT_LE(worst, 1e-5f * scale) << "position " << t;
  }
}

// A text prompt is tokenized before the model is loaded (its KV cache as long as the prompt):
// the same logits as its ids given with --ids.
TEST(LogitsProgram, TextPromptEqualsItsIds) {
  const std::string scratch = make_temp_dir();
  const std::string& model_dir = quantized_stories260k("f32");
  const std::vector<int> ids = Tokenizer::load(model_dir + "/tokenizer.model").encode("Once upon a time", true);
  std::string list;
  for (const int id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  for (const std::string& input : {std::string("-p 'Once upon a time'"), "--ids " + list}) {
    const ProgramRun run = run_program_for_test(
        "gemlite-logits", "-m " + model_dir + " --device cpu " + input + " -o " + scratch + "/" +
                              (input[1] == 'p' ? "text" : "ids") + ".safetensors", true);
    ASSERT_EQ(run.exit_code, 0) << run.output;
  }
  const SafetensorsFile text = SafetensorsFile::open(scratch + "/text.safetensors");
  const SafetensorsFile given = SafetensorsFile::open(scratch + "/ids.safetensors");
  for (const char* name : {"ids", "logits"}) {
    ASSERT_EQ(text.get(name).nbytes(), given.get(name).nbytes()) << name;
    EXPECT_EQ(std::memcmp(text.get(name).data, given.get(name).data, text.get(name).nbytes()), 0) << name;
  }
}

TEST(LogitsProgram, BadInputIsOneLineAndExitOne) {
  const std::string scratch = make_temp_dir();
  const std::string& model_dir = quantized_stories260k("f32");
  const std::string out = " -o " + scratch + "/x.safetensors";
  std::string too_long = "1";  // 600 ids: longer than stories260K's 512 positions
  for (int i = 1; i < 600; ++i) too_long += ",300";
  for (const std::string& args : std::vector<std::string>{"--ids '1,x'" + out, "--ids 1,99999" + out, "--ids ''" + out,
                                  "--ids 1,,403" + out, "--ids 1,403," + out,
                                  out.substr(1), "--ids 1 -p hi" + out, "--ids 1", "--ids " + too_long + out}) {
    const ProgramRun run = run_program_for_test("gemlite-logits", "-m " + model_dir + " " + args, true);
    EXPECT_EQ(run.exit_code, 1) << args;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << args << ": " << run.output;
    EXPECT_EQ(run.output.rfind("gemlite-logits: error: ", 0), 0u) << run.output;
  }
}

// -o replaces an earlier run's safetensors file, never anything else (a prompt's text file
// had been overwritten without a word).
TEST(LogitsProgram, ReplacesOnlyASafetensorsFile) {
  const std::string scratch = make_temp_dir();
  const std::string& model_dir = quantized_stories260k("f32");
  const std::string text = scratch + "/prompt.txt";
  {
    std::ofstream out(text);
    out << "Once upon a time";
  }
  const ProgramRun refused =
      run_program_for_test("gemlite-logits", "-m " + model_dir + " --device cpu --ids 1,403 -o " + text, true);
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_EQ(refused.output, "gemlite-logits: error: " + text +
                                ": exists and is not a safetensors file: not replaced (remove it or name another "
                                "file)\n");
  std::ifstream kept(text);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "Once upon a time");

  const std::string file = scratch + "/logits.safetensors";
  for (const char* ids : {"1,403,407", "1,403"}) {  // the second run replaces the first's file
    const ProgramRun run =
        run_program_for_test("gemlite-logits", "-m " + model_dir + " --device cpu --ids " + ids + " -o " + file, true);
    ASSERT_EQ(run.exit_code, 0) << run.output;
  }
  EXPECT_EQ(SafetensorsFile::open(file).get("ids").shape, (std::vector<int64_t>{2}));
}

}  // namespace
}  // namespace gemlite
