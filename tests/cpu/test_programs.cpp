// The four programs as a user meets them: bad input gives exit code 1 and one line on
// stderr that names the problem; good input runs end to end on stories260K.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "models/llama_model.h"
#include "models/packed_checkpoint.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/io/safetensors.h"
#include "tests/cpu/program_runner.h"
#include "tokenizer/tokenizer.h"

namespace gemlite {
namespace {

namespace fs = std::filesystem;

// stories260K converted once for all tests here (f32, with its tokenizer).
const std::string& stories_dir() {
  static const std::string dir = [] {
    const std::string out = make_temp_dir() + "/stories260K";
    const ProgramRun run = run_program_for_test(
        "gemlite-quantize",
        shared_file("models/stories260K/stories260K.bin") + " " + out + " f32 --tokenizer " +
            shared_file("models/stories260K/tok512.model"),
        true);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    return out;
  }();
  return dir;
}

// Exit code 1 and exactly one line "<program>: error: ..." that contains `expected`.
void expect_one_line_error(const std::string& program, const std::string& arguments,
                           const std::string& expected) {
  const ProgramRun run = run_program_for_test(program, arguments, /*only_stderr=*/true);
  EXPECT_EQ(run.exit_code, 1) << program << " " << arguments << "\n" << run.output;
  EXPECT_EQ(run.output.rfind(program + ": error: ", 0), 0u) << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  EXPECT_NE(run.output.find(expected), std::string::npos) << "expected '" << expected << "' in: " << run.output;
}

TEST(Programs, UnknownFlagIsOneLineError) {
  for (const char* program : {"gemlite-chat", "gemlite-bench", "gemlite-perplexity", "gemlite-quantize"})
    expect_one_line_error(program, "--no-such-flag", "no-such-flag");
}

TEST(Programs, MissingModelDirectoryIsNamed) {
  expect_one_line_error("gemlite-chat", "-m /nonexistent/model -p hi", "/nonexistent/model");
  expect_one_line_error("gemlite-perplexity", "-m /nonexistent/model -f /etc/hostname", "/nonexistent/model");
  expect_one_line_error("gemlite-bench", "-m /nonexistent/model", "/nonexistent/model");
}

// A folder where a checkpoint's file belongs (a directory read as a stream threw a bare
// "basic_filebuf::underflow" error naming nothing).
TEST(Programs, AFolderWhereAFileBelongsIsNamed) {
  for (const char* file : {"tokenizer.model", "config.json"}) {
    const std::string dir = make_temp_dir() + "/folder-" + file;
    fs::copy(stories_dir(), dir);
    fs::remove(dir + "/" + file);
    fs::create_directory(dir + "/" + file);
    expect_one_line_error("gemlite-chat", "-m " + dir + " -p hi --device cpu", dir + "/" + file);
  }
}

// stories260K.bin: a 28-byte header, then the embedding [512, 64] and the attention norms
// [5, 64]; then wq [5, 64, 64]. A copy with wq[0][0][column] set to `value`.
std::string stories_bin_with_wq(int column, float value) {
  const std::string bin = make_temp_dir() + "/changed.bin";
  fs::copy_file(shared_file("models/stories260K/stories260K.bin"), bin);
  std::fstream file(bin, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(28 + 4 * (512 * 64 + 5 * 64 + column));
  file.write(reinterpret_cast<const char*>(&value), 4);
  return bin;
}

// A NaN among a source's weights stops the conversion with the file and the tensor named
// and nothing written.
TEST(Programs, QuantizeNamesTheTensorOfANonFiniteWeight) {
  const std::string bin = stories_bin_with_wq(0, std::nanf(""));
  const std::string out = make_temp_dir() + "/nan-model";
  const ProgramRun run = run_program_for_test("gemlite-quantize", bin + " " + out + " q8", true);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const std::string error_line = run.output.substr(run.output.rfind("gemlite-quantize: error: "));
  EXPECT_EQ(std::count(error_line.begin(), error_line.end(), '\n'), 1) << run.output;
  EXPECT_NE(error_line.find(bin + ": tensor 'model.layers.0.self_attn.q_proj.weight'"), std::string::npos)
      << run.output;
  EXPECT_NE(error_line.find("not finite"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(leftovers_beside(out).empty());
}

// A weight of 2e6 needs a q4 scale of ~133000, beyond fp16: it had been written as inf
// (exit 0, and the model printed only <unk>). The error names the tensor, row and group;
// q8 (255 steps, scale ~7800) holds the same weight.
TEST(Programs, QuantizeRefusesAScaleBeyondFp16) {
  const std::string bin = stories_bin_with_wq(10, 2e6f);
  const std::string out = make_temp_dir() + "/big-model";
  const ProgramRun run = run_program_for_test("gemlite-quantize", bin + " " + out + " q4g64", true);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const std::string error_line = run.output.substr(run.output.rfind("gemlite-quantize: error: "));
  EXPECT_EQ(std::count(error_line.begin(), error_line.end(), '\n'), 1) << run.output;
  for (const std::string& fragment : std::vector<std::string>{bin + ": tensor 'model.layers.0.self_attn.q_proj.weight'", "row 0, group 0",
                                                              "scale", "does not fit fp16"})
    EXPECT_NE(error_line.find(fragment), std::string::npos) << fragment << " not in " << run.output;
  EXPECT_FALSE(fs::exists(out));
  const ProgramRun q8 = run_program_for_test("gemlite-quantize", bin + " " + out + " q8", true);
  EXPECT_EQ(q8.exit_code, 0) << q8.output;
  const PackedCheckpoint ckpt = load_packed_checkpoint(out);
  std::vector<float> row(64);
  dequantize_row(ckpt.layers[0].q, 0, row.data());
  EXPECT_NEAR(row[10], 2e6f, 2e6f / 254);
}

// A path the system cannot resolve (here through a symlink loop) is "<path>: cannot
// access: <reason>", where std::filesystem's "filesystem error: status: ... [path]" text
// had reached the user: as a source, an output directory, a model and an output file.
TEST(Programs, AnUnresolvablePathIsCannotAccess) {
  const std::string dir = make_temp_dir();
  fs::create_symlink(dir + "/loop", dir + "/loop");
  const std::string bad = dir + "/loop/x";
  const std::string expected = bad + ": cannot access: Too many levels of symbolic links";
  const std::string bin = shared_file("models/stories260K/stories260K.bin");
  expect_one_line_error("gemlite-quantize", bad + " " + dir + "/out q8", expected);
  expect_one_line_error("gemlite-quantize", bin + " " + bad + " q8", expected);
  expect_one_line_error("gemlite-chat", "-m " + bad + " -p hi --device cpu", expected);
  expect_one_line_error("gemlite-logits", "-m " + stories_dir() + " --device cpu -p hi -o " + bad, expected);
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

// From the second audit: a system prompt longer than the context (every turn used to fail
// and the program still exited 0), and gemlite-logits -o at something not a plain file
// (-o /dev/null replaced the device with a regular file).
TEST(Programs, SystemPromptAndOutputPathAreCheckedUpFront) {
  std::string long_system;
  for (int i = 0; i < 200; ++i) long_system += "word ";
  const ProgramRun chat = run_program_for_test(
      "gemlite-chat", "-m " + stories_dir() + " -c 64 --device cpu --chat-template zephyr -sys '" + long_system + "'",
      true, "hi\nhello\n");
  EXPECT_EQ(chat.exit_code, 1) << chat.output;
  EXPECT_NE(chat.output.find("-sys/--system-prompt takes"), std::string::npos) << chat.output;

  const std::string dir = make_temp_dir(), target = dir + "/target.safetensors", link = dir + "/link.safetensors";
  std::ofstream(target) << "keep";
  fs::create_symlink(target, link);
  for (const std::string& out : {link, dir}) {
    expect_one_line_error("gemlite-logits", "-m " + stories_dir() + " --device cpu -p hi -o " + out, "not a regular file");
  }
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(std::ifstream(target).rdbuf()), {}), "keep");
}

// A packed checkpoint given as SOURCE is said to be one (it was "missing tensor
// '...q_proj.weight'"); a binary file given as text is refused (it scored a perplexity in
// the billions).
TEST(Programs, WrongKindsOfInputAreNamed) {
  expect_one_line_error("gemlite-quantize", stories_dir() + " " + make_temp_dir() + "/again q4g64",
                        "is a gemlite packed checkpoint already");
  const std::string binary = make_temp_dir() + "/binary.txt";
  std::ofstream(binary, std::ios::binary) << std::string("Once upon a time\0\x01\x02", 19);
  expect_one_line_error("gemlite-perplexity", "-m " + stories_dir() + " -f " + binary, "is not text");
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -f " + binary, "is not text");
  // Every file a program reads goes through one check (runtime/io/readable_file.h): a
  // missing one, a directory and a FIFO (which a stream would wait on forever) are named.
  const std::string dir = make_temp_dir();
  expect_one_line_error("gemlite-perplexity", "-m " + stories_dir() + " -f " + dir + "/absent.txt", "no such file");
  expect_one_line_error("gemlite-perplexity", "-m " + stories_dir() + " -f " + dir, "not a regular file");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -f " + fifo, "not a regular file");
  expect_one_line_error("gemlite-perplexity", "-m " + stories_dir() + " --kl-divergence-base " + dir +
                                              " --kl-divergence", "not a regular file");
}

TEST(Programs, MissingTokenizerIsNamed) {
  const std::string dir = make_temp_dir() + "/no-tokenizer";
  fs::copy(stories_dir(), dir);
  fs::remove(dir + "/tokenizer.model");
  expect_one_line_error("gemlite-chat", "-m " + dir + " -p hi", dir + "/tokenizer.model");
}

TEST(Programs, QuantizeRejectsBadSourceFormatAndOverride) {
  expect_one_line_error("gemlite-quantize", "/nonexistent.bin /tmp/x q4g64", "/nonexistent.bin");
  expect_one_line_error("gemlite-quantize",
                        shared_file("models/stories260K/stories260K.bin") + " /tmp/x q9", "q9");
  expect_one_line_error("gemlite-quantize",
                        shared_file("models/stories260K/stories260K.bin") + " /tmp/x q4 --override lm_head",
                        "lm_head");
  expect_one_line_error("gemlite-quantize",
                        shared_file("models/stories260K/stories260K.bin") + " " + make_temp_dir() + "/x q4 --override mlp.dwn_proj=q8",
                        "mlp.dwn_proj");
  expect_one_line_error("gemlite-quantize",
                        shared_file("models/stories260K/stories260K.bin") + " /tmp/x q4 --tokenizer /nonexistent.model",
                        "/nonexistent.model");
  // A .gguf whose magic is damaged had been read as llama2.c ("header field dim = ... out of range").
  const std::string damaged = make_temp_dir() + "/model.gguf";
  std::ofstream(damaged, std::ios::binary) << std::string("GG\0\0", 4) << std::string(64, '\1');
  expect_one_line_error("gemlite-quantize", damaged + " /tmp/x q8", damaged + ": not a GGUF file");
  // FORMAT gguf keeps a GGUF's quantized types; an unquantized one is told what to give.
  expect_one_line_error("gemlite-quantize",
                        shared_file("models/stories260K/stories260K.gguf") + " " + make_temp_dir() + "/x gguf",
                        "has no quantized tensors (give f16 or f32)");
}

TEST(Programs, TruncatedCheckpointIsNamedAndNothingCrashes) {
  const std::string dir = make_temp_dir() + "/truncated";
  fs::copy(stories_dir(), dir);
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") / 2);
  expect_one_line_error("gemlite-chat", "-m " + dir + " -p hi", dir + "/model.safetensors");
}

TEST(Programs, BadFlagValuesAreOneLineErrors) {
  expect_one_line_error("gemlite-bench", "--synthetic stories260k -o xml", "xml");
  expect_one_line_error("gemlite-bench", "--synthetic no-such-model", "no-such-model");
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " --chat-template nope", "nope");
  // Refused with -p too, where no template is used (it ran, silently).
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi --chat-template nope", "nope");
  // A list with an empty item is a typo: refused whole, the flag named (",,": cxxopts named
  // only the empty value; "16," ran as -p 16; "q8,,q4g64" as q8,q4g64).
  expect_one_line_error("gemlite-bench", "--synthetic stories260k -p 16,,32", "-p: ");
  expect_one_line_error("gemlite-bench", "--synthetic stories260k -p 16,", "--n-prompt: '16,' has an empty item");
  expect_one_line_error("gemlite-bench", "--synthetic stories260k -f q8,,q4g64", "--format: 'q8,,q4g64' has an empty item");
  expect_one_line_error("gemlite-bench", "--synthetic stories260k -f q8,", "--format: 'q8,'");
  expect_one_line_error("gemlite-bench", "-m /nonexistent/packed -f q8", "-f/--format picks the formats of --synthetic");
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi --device tpu", "tpu");
  expect_one_line_error("gemlite-perplexity", "-m " + stories_dir() + " -f /nonexistent.txt", "/nonexistent.txt");
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi --temp abc", "--temp: Argument");
  // The flag is named whichever way its value is given (cxxopts names only the value).
  expect_one_line_error("gemlite-bench", "--synthetic stories260k -t 2x", "-t: Argument");
  expect_one_line_error("gemlite-perplexity", "-m " + stories_dir() + " --ctx-size=1e3", "--ctx-size: Argument");
  // A float's trailing text is an error, not dropped: "--temp 0,7" ran greedy.
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi --temp 0,7", "--temp: '0,7' is not a number");
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi --top-p=0.9.9", "--top-p: '0.9.9'");
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi --temp 0x1p+1", "--temp: '0x1p+1'");
  // llama.cpp's multi-letter flags this program lacks are named, not read as -n "gl"; a
  // value that starts with a dash is still a value.
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi -ngl 99", "unknown option '-ngl'");
  const ProgramRun dash = run_program_for_test("gemlite-chat", "-m " + stories_dir() + " -p '-Once upon' -n 2 --temp 0", false);
  EXPECT_EQ(dash.exit_code, 0);
  EXPECT_EQ(dash.output.rfind("-Once upon", 0), 0u) << dash.output;
}

// Without a usable GPU (none visible here, whatever the machine has) --kernels says so in
// one line; it had printed a source file, a line and the CUDA call.
TEST(Programs, KernelBenchmarksWithoutAGpuIsAOneLineError) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = visible ? visible : "";
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
#ifdef GEMLITE_WITH_CUDA
  expect_one_line_error("gemlite-bench", "--kernels --kernel-set attention", "--kernels: no");  // no (usable) CUDA device
#else
  expect_one_line_error("gemlite-bench", "--kernels --kernel-set attention", "--kernels needs a build with CUDA");
#endif
  if (visible) setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  else unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(Programs, NonsenseNumbersAreOneLineErrors) {
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi --repeat-penalty 0", "repeat-penalty");
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi -n -5", "n-predict");
  expect_one_line_error("gemlite-perplexity", "-m " + stories_dir() + " -f " + shared_file("data/tinystories/tinystories_sample.txt") + " --chunks 0", "chunks");
  expect_one_line_error("gemlite-perplexity", "-m " + stories_dir() + " -f /tmp", "/tmp");
  expect_one_line_error("gemlite-bench", "--synthetic stories260k -p 0 -n 0", "nothing to measure");
  expect_one_line_error("gemlite-bench", "--synthetic stories260k -d -5", "-d");
  // libgomp crashed on tens of thousands of threads.
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi -t 100000 --device cpu", "--threads 100000");
  // Probabilities outside 0..1 and negative counts other than -1 ran as if valid.
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi --top-p 2", "--top-p 2: expected 0 .. 1");
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi --min-p -0.5", "--min-p -0.5: expected");
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi --repeat-last-n -5", "--repeat-last-n");
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p hi -s -5", "--seed");
  for (const char* edge : {"--top-p 1 --min-p 0", "--top-p 0 --min-p 1", "--repeat-last-n -1 --repeat-penalty 1.1 -s 0"}) {
    const ProgramRun run = run_program_for_test(
        "gemlite-chat", "--device cpu -m " + stories_dir() + " -p 'Once upon' -n 2 " + edge, true);
    EXPECT_EQ(run.exit_code, 0) << edge << "\n" << run.output;
  }
}

// A packed checkpoint whose norm is not F32, or whose quantization_config has a key of the
// wrong JSON type, is refused at load with the file named (the first aborted inside an
// OpenMP loop, the second printed nlohmann's bare type_error).
TEST(Programs, CheckpointWithWrongTypesIsAOneLineError) {
  const std::string dir = make_temp_dir() + "/wrong-types";
  fs::copy(stories_dir(), dir);
  {
    nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
    config["quantization_config"]["format_version"] = "2";
    std::ofstream(dir + "/config.json") << config.dump();
  }
  expect_one_line_error("gemlite-chat", "-m " + dir + " -p hi --device cpu", dir + "/config.json");
  {
    nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
    config["quantization_config"]["format_version"] = 2;
    config["gemlite_chat_template"] = "vicuna";
    std::ofstream(dir + "/config.json") << config.dump();
  }
  expect_one_line_error("gemlite-chat", "-m " + dir + " --device cpu", dir + "/config.json");

  const std::string norm_dir = make_temp_dir() + "/i32-norm";
  fs::copy(stories_dir(), norm_dir);
  {
    const SafetensorsFile file = SafetensorsFile::open(stories_dir() + "/model.safetensors");
    SafetensorsWriter writer;
    writer.set_metadata("format", "gemlite");
    writer.set_metadata("format_version", "2");
    for (const std::string& name : file.names()) {
      HostTensor t = file.get(name);
      if (name == "model.norm.weight") t = HostTensor::copy_of(DType::I32, t.shape, t.data);  // same bytes
      writer.add(name, t);
    }
    writer.write(norm_dir + "/model.safetensors");
  }
  expect_one_line_error("gemlite-chat", "-m " + norm_dir + " -p hi --device cpu", "model.norm.weight");
}

TEST(Programs, QuantizeRejectsATokenizerOfAnotherModel) {
  expect_one_line_error("gemlite-quantize",
                        shared_file("models/stories260K/stories260K.bin") + " " + make_temp_dir() + "/x q8 --tokenizer " +
                            shared_file("models/llama2-tokenizer/tokenizer.model"),
                        "llama2-tokenizer/tokenizer.model");
}

TEST(Programs, QuantizeNeverReplacesADirectoryThatIsNotAPackedCheckpoint) {
  // e.g. the source model directory itself, given as the output by mistake
  const std::string dir = make_temp_dir();
  std::ofstream(dir + "/config.json") << "{\"model_type\": \"llama\"}";
  expect_one_line_error("gemlite-quantize",
                        shared_file("models/stories260K/stories260K.bin") + " " + dir + " q8", "refusing");
  EXPECT_TRUE(fs::exists(dir + "/config.json"));
}

TEST(Programs, QuantizeReplacesAnEarlierCheckpointGivenWithATrailingSlash) {
  const std::string dir = make_temp_dir() + "/packed";
  for (int i = 0; i < 2; ++i) {
    const ProgramRun run = run_program_for_test(
        "gemlite-quantize", shared_file("models/stories260K/stories260K.bin") + " " + dir + "/ q8", true);
    EXPECT_EQ(run.exit_code, 0) << run.output;
  }
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  EXPECT_TRUE(leftovers_beside(dir).empty());
}

TEST(Programs, ChatWithNPredictBeyondTheContextKeepsAnswering) {
  const ProgramRun run = run_program_for_test(
      "gemlite-chat", "-m " + stories_dir() + " -n 100 --temp 0 -c 64 --chat-template completion", true,
      "Once upon a time\nLily saw a cat\n");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  size_t answers = 0;  // both turns answered, the second after the context made room
  for (size_t at = run.output.find("[ Prompt: "); at != std::string::npos; at = run.output.find("[ Prompt: ", at + 1))
    ++answers;
  EXPECT_EQ(answers, 2u) << run.output;
}

TEST(Programs, ChatMessageLongerThanTheContextIsReportedAndTheChatGoesOn) {
  std::string long_line;
  for (int i = 0; i < 40; ++i) long_line += "Once upon a time there was a cat. ";
  const ProgramRun run = run_program_for_test(
      "gemlite-chat", "-m " + stories_dir() + " -n 4 --temp 0 -c 32 --chat-template completion", true,
      long_line + "\nLily saw a cat\n");
  EXPECT_NE(run.output.find("do not fit"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("[ Prompt: "), std::string::npos) << run.output;  // the next turn ran
  // Piped turns: the refused one makes the exit code 1 at the end, with a line that says why.
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("1 turn from stdin not answered"), std::string::npos) << run.output;
}

// -f FILE (llama-cli's): the file's text is the prompt, exactly like -p; a missing file is
// one line naming it; -p and -f together are refused.
TEST(Programs, PromptFromAFileIsTheSameCompletion) {
  const std::string prompt = make_temp_dir() + "/prompt.txt";
  std::ofstream(prompt) << "Once upon a time";
  const ProgramRun run = run_program_for_test("gemlite-chat", "-m " + stories_dir() + " -f " + prompt + " -n 24 --temp 0", false);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.output.rfind("Once upon a time, there was a little girl named Lily. She loved to play outside", 0), 0u)
      << run.output;
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -f /nonexistent/prompt.txt", "/nonexistent/prompt.txt");
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -f " + prompt + " -p hi", "-p and -f");
  // A prompt longer than the context names its file.
  const std::string long_prompt = make_temp_dir() + "/long-prompt.txt";
  std::ofstream(long_prompt) << "Once upon a time there was a cat. Once upon a time there was a dog.";
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -f " + long_prompt + " -c 8", long_prompt + ": the prompt's");
}

TEST(Programs, OneShotGreedyCompletionIsTheReferenceStory) {
  const ProgramRun run =
      run_program_for_test("gemlite-chat", "-m " + stories_dir() + " -p 'Once upon a time' -n 24 --temp 0", false);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.output.rfind("Once upon a time, there was a little girl named Lily. She loved to play outside", 0), 0u)
      << run.output;
}

// -p reads llama-cli's escapes (\n \t \\ \xHH; any other backslash kept) unless
// --no-escape; the prompt is echoed as the model read it.
TEST(Programs, PromptEscapesAreReadUnlessNoEscape) {
  const std::string args = "-m " + stories_dir() + " -n 0 --temp 0 --device cpu -p 'Once\\nupon\\ta \\\\x\\x41\\q'";
  const ProgramRun escaped = run_program_for_test("gemlite-chat", args, false);
  EXPECT_EQ(escaped.exit_code, 0) << escaped.output;
  EXPECT_EQ(escaped.output.rfind("Once\nupon\ta \\xA\\q\n", 0), 0u) << escaped.output;
  const ProgramRun literal = run_program_for_test("gemlite-chat", args + " --no-escape", false);
  EXPECT_EQ(literal.exit_code, 0) << literal.output;
  EXPECT_EQ(literal.output.rfind("Once\\nupon\\ta \\\\x\\x41\\q\n", 0), 0u) << literal.output;
  expect_one_line_error("gemlite-chat", "-m " + stories_dir() + " -p 'a\\x00b' --device cpu", "NUL byte");
}

// Generation stops at the model config's end-of-sequence id as well as the tokenizer's
// (they differ for Phi-3): with the config's eos made the "," that greedy decoding writes
// right after "Once upon a time", the completion ends there.
TEST(Programs, CompletionStopsAtTheConfigsEos) {
  const std::string dir = make_temp_dir() + "/stories-eos";
  fs::copy(stories_dir(), dir, fs::copy_options::recursive);
  const Tokenizer tokenizer = Tokenizer::load(dir + "/tokenizer.model");
  const std::vector<int> with_comma = tokenizer.encode("Once upon a time,", false),
                         without = tokenizer.encode("Once upon a time", false);
  ASSERT_EQ(with_comma.size(), without.size() + 1);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  config["eos_token_id"] = with_comma.back();
  std::ofstream(dir + "/config.json") << config.dump(2);
  const ProgramRun run = run_program_for_test("gemlite-chat", "-m " + dir + " -p 'Once upon a time' -n 24 --temp 0", false);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.output, "Once upon a time\n") << run.output;
}

TEST(Programs, ChatReadsTurnsFromStdinAndEndsCleanlyOnEof) {
  const ProgramRun run = run_program_for_test(
      "gemlite-chat", "-m " + stories_dir() + " -n 8 --temp 0 -c 64 --chat-template completion", true,
      "Once upon a time\nLily saw a cat\nThe end\n");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  size_t reports = 0;
  for (size_t at = run.output.find("[ Prompt: "); at != std::string::npos; at = run.output.find("[ Prompt: ", at + 1))
    ++reports;
  EXPECT_EQ(reports, 3u) << run.output;  // one speed line per answer
  // On stdout each answer is a line of its own (piped answers ran together); a line of
  // blanks is no turn.
  const ProgramRun answers = run_program_for_test(
      "gemlite-chat", "-m " + stories_dir() + " -n 8 --temp 0 -c 64 --chat-template completion", false,
      "Once upon a time\n  \nLily saw a cat\n");
  EXPECT_EQ(answers.exit_code, 0);
  EXPECT_EQ(std::count(answers.output.begin(), answers.output.end(), '\n'), 2) << answers.output;
}

// Without -c the context is llama-cli's 4096 positions, or the model's own when shorter
// (the model's whole context gave a Llama-3.1-shaped model a 16 GiB KV cache); -c 0 is the
// model's; beyond it, a warning.
TEST(Programs, ChatContextDefaultsToLlamaClisAtMostTheModels) {
  const auto context_line = [](const std::string& dir, const std::string& flags) {
    const ProgramRun run = run_program_for_test("gemlite-chat", "-m " + dir + " -p Once -n 1 --temp 0 " + flags, true);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    return run.output;
  };
  EXPECT_NE(context_line(stories_dir(), "").find("context: 512 positions (the model's: 512)"), std::string::npos);
  const std::string dir = make_temp_dir() + "/stories-long";
  fs::copy(stories_dir(), dir, fs::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  config["max_position_embeddings"] = 8192;
  std::ofstream(dir + "/config.json") << config.dump(2);
  EXPECT_NE(context_line(dir, "").find("context: 4096 positions (the model's: 8192)"), std::string::npos);
  EXPECT_NE(context_line(dir, "-c 0").find("context: 8192 positions"), std::string::npos);
  const std::string beyond = context_line(stories_dir(), "-c 1024");
  EXPECT_NE(beyond.find("context: 1024 positions"), std::string::npos) << beyond;
  EXPECT_NE(beyond.find("beyond the model's training context of 512"), std::string::npos) << beyond;
}

TEST(Programs, FullContextNeverCrashes) {
  // -c 24: the third turn cannot fit next to the first two, so the oldest are dropped.
  const ProgramRun chat = run_program_for_test(
      "gemlite-chat", "-m " + stories_dir() + " -n 6 --temp 0 -c 24 --chat-template completion", true,
      "Once upon a time\nLily saw a big cat\nThe cat ran away\nThen Lily went home\n");
  EXPECT_EQ(chat.exit_code, 0) << chat.output;
  EXPECT_NE(chat.output.find("context full"), std::string::npos) << chat.output;

  // One-shot: the 100 tokens asked for do not fit, so the cut answer ends with exit code 1
  // and the line that says why; with -n -1 a full context is the end asked for.
  const ProgramRun once = run_program_for_test(
      "gemlite-chat", "-m " + stories_dir() + " -p 'Once upon a time' -n 100 --temp 0 -c 12", true);
  EXPECT_EQ(once.exit_code, 1) << once.output;
  EXPECT_NE(once.output.find("[context full after 12 tokens: answer cut; raise -c/--ctx-size]"), std::string::npos)
      << once.output;
  const ProgramRun unlimited = run_program_for_test(
      "gemlite-chat", "-m " + stories_dir() + " -p 'Once upon a time' -n -1 --temp 0 -c 12", true);
  EXPECT_EQ(unlimited.exit_code, 0) << unlimited.output;
  EXPECT_NE(unlimited.output.find("context full"), std::string::npos) << unlimited.output;
}

// llama-bench's lists: -p, -n and -d take comma-separated values and --pg pp,tg pairs;
// every depth runs each test, named "pp4", "tg3", "pp4+tg2", with " @ d40" at depth 40
// (filled first), and the csv carries n_prompt, n_gen and n_depth. On the CPU, so it runs
// in CI.
TEST(Programs, BenchRunsLlamaBenchListsDepthsAndPromptGenPairs) {
  const ProgramRun run = run_program_for_test(
      "gemlite-bench", "--device cpu --synthetic stories260k -f q8 -p 4,6 -n 3 -d 0,40 --pg 4,2 -r 1 -o csv", false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find(",n_gen,n_depth,avg_ts,"), std::string::npos) << run.output;
  for (const char* row : {",pp4,4,0,0,", ",pp6,6,0,0,", ",tg3,0,3,0,", ",pp4+tg2,4,2,0,", ",pp4 @ d40,4,0,40,",
                          ",pp6 @ d40,6,0,40,", ",tg3 @ d40,0,3,40,", ",pp4+tg2 @ d40,4,2,40,"})
    EXPECT_NE(run.output.find(row), std::string::npos) << "no row " << row << " in:\n" << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 9) << run.output;  // header + 8 rows
}

// -c sets the KV cache (gemlite-chat's context, e.g.) where the tests fit in it; one line
// otherwise.
TEST(Programs, BenchCtxSizeSetsTheCacheTheTestsMustFitIn) {
  const ProgramRun run = run_program_for_test(
      "gemlite-bench", "--device cpu --synthetic stories260k -f q8 -p 0 -n 2 -d 40 -c 100 -r 1 -o csv", false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find(",tg2 @ d40,0,2,40,"), std::string::npos) << run.output;
  expect_one_line_error("gemlite-bench", "--device cpu --synthetic stories260k -p 0 -n 2 -d 40 -c 41",
                        "-c/--ctx-size 41: the tests need 42 positions");
  expect_one_line_error("gemlite-bench", "--device cpu --synthetic stories260k -p 0 -n 2 -c -1", "-c/--ctx-size -1");
  // Past the model's training context (512) with tests that fit: the warning names the cache.
  const ProgramRun beyond = run_program_for_test(
      "gemlite-bench", "--device cpu --synthetic stories260k -f q8 -p 0 -n 2 -c 600 -r 1 -o csv", true);
  EXPECT_EQ(beyond.exit_code, 0) << beyond.output;
  EXPECT_NE(beyond.output.find("a KV cache of 600 positions, beyond"), std::string::npos) << beyond.output;
}

// Tests that reach past the model's training context (stories260K: 512) run, as
// llama-bench's do, with one warning line that says so; within it there is none.
TEST(Programs, BenchWarnsBeyondTheTrainingContext) {
  const ProgramRun beyond = run_program_for_test(
      "gemlite-bench", "--device cpu --synthetic stories260k -f q8 -p 0 -n 2 -d 512 -r 1 -o csv", true);
  EXPECT_EQ(beyond.exit_code, 0) << beyond.output;
  EXPECT_NE(beyond.output.find("warning: stories260k q8: a KV cache of 514 positions, beyond the model's training "
                               "context of 512"),
            std::string::npos)
      << beyond.output;
  const ProgramRun within = run_program_for_test(
      "gemlite-bench", "--device cpu --synthetic stories260k -f q8 -p 0 -n 2 -d 510 -r 1 -o csv", true);
  EXPECT_EQ(within.exit_code, 0) << within.output;
  EXPECT_EQ(within.output.find("warning"), std::string::npos) << within.output;
}

// -o json: one array of the tests (written as each finishes, closed at the end) with
// llama-bench's key names where it has the field.
TEST(Programs, BenchJsonIsOneArrayWithLlamaBenchsKeys) {
  const ProgramRun run =
      run_program_for_test("gemlite-bench", "--device cpu --synthetic stories260k -f q8 -p 4 -n 2 -r 1 -o json", false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json rows = nlohmann::json::parse(run.output);
  ASSERT_EQ(rows.size(), 2u) << run.output;
  EXPECT_EQ(rows[0]["test"], "pp4");
  EXPECT_EQ(rows[1]["test"], "tg2");
  for (const char* key : {"model_size", "model_n_params", "n_threads", "n_prompt", "n_gen", "avg_ts", "stddev_ts"})
    EXPECT_TRUE(rows[1].contains(key)) << key;
  EXPECT_GT(rows[1]["avg_ts"].get<double>(), 0.0);
}

// llama-bench spells the pair flag -pg.
TEST(Programs, BenchTakesLlamaBenchsPgSpelling) {
  const ProgramRun run =
      run_program_for_test("gemlite-bench", "--device cpu --synthetic stories260k -f q8 -p 0 -n 0 -pg 4,2 -r 1 -o csv", false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find(",pp4+tg2,4,2,0,"), std::string::npos) << run.output;
}

TEST(Programs, BenchListsAndPairsRejectBadValuesInOneLine) {
  expect_one_line_error("gemlite-bench", "--synthetic stories260k --pg 512", "pairs");
  expect_one_line_error("gemlite-bench", "--synthetic stories260k --pg 0,5", "--pg 0,5");
  expect_one_line_error("gemlite-bench", "--synthetic stories260k -f ,", "--format: ',' has an empty item");
  expect_one_line_error("gemlite-bench", "--synthetic stories260k --kernel-set gemv", "--kernels");
  expect_one_line_error("gemlite-bench", "--device cpu --synthetic stories260k --trace", "--trace");
  // p + n overflowed int and an 8 GB prompt was drawn before the context ran out.
  expect_one_line_error("gemlite-bench", "--device cpu --synthetic stories260k --pg 2000000000,2000000000 -r 1",
                        "positions");
  expect_one_line_error("gemlite-bench", "--synthetic stories260k -p 4,-1", "-1");
  expect_one_line_error("gemlite-bench", "--synthetic stories260k -p 4,x", "x");
}

// aidreams260K ships only a llama2.c tokenizer.bin: gemlite-quantize builds the
// checkpoint's tokenizer.model from it, and the chat encodes, runs and decodes text.
TEST(Programs, QuantizeTakesALlama2cTokenizerBin) {
  const std::string out = make_temp_dir() + "/aidreams";
  const ProgramRun quantize = run_program_for_test(
      "gemlite-quantize", shared_file("models/aidreams260K/aidreams260K.bin") + " " + out + " q8 --tokenizer " +
                              shared_file("models/aidreams260K/aidreams_tok512.bin"),
      true);
  ASSERT_EQ(quantize.exit_code, 0) << quantize.output;
  const ProgramRun chat =
      run_program_for_test("gemlite-chat", "--device cpu -m " + out + " -p \"Once upon a time\" --temp 0 -n 16", false);
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  // The same greedy continuation computed here, on the CPU backend from the same packed
  // checkpoint and the tokenizer.model gemlite-quantize built: the prompt's ids, then 16
  // argmax steps (fewer at EOS), decoded with the prompt.
  const PackedCheckpoint checkpoint = load_packed_checkpoint(out);
  const Tokenizer tokenizer = Tokenizer::load(out + "/tokenizer.model");
  std::unique_ptr<Backend> backend = make_cpu_backend();
  LlamaModel model(checkpoint, *backend);
  std::vector<int> ids = tokenizer.encode("Once upon a time", /*add_bos=*/true);
  std::vector<float> logits;  // [vocab]
  model.forward(ids, 0, false, logits);
  for (int step = 0; step < 16; ++step) {
    const int next = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (next == tokenizer.eos_id()) break;
    ids.push_back(next);
    model.forward({next}, int(ids.size()) - 1, false, logits);
  }
  const std::string expected = tokenizer.decode(ids);
  ASSERT_GT(expected.size(), std::string("Once upon a time").size());
  // The whole generation, up to the newline the chat ends it with (a shorter or longer
  // continuation would not be followed by it).
  EXPECT_NE(chat.output.find(expected + "\n"), std::string::npos)
      << "expected \"" << expected << "\" then a newline in:\n" << chat.output;
}

}  // namespace
}  // namespace gemlite
