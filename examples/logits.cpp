// gemlite-logits: the model's logits at every position of a prompt, saved as a safetensors
// file ("logits" [T, vocab] F32, "ids" [T] I32), for comparing gemlite with another
// implementation (scripts/compare_transformers.py compares it with Hugging Face
// transformers). The prompt is either text (tokenized with BOS, like gemlite-chat -p) or
// token ids given directly, so the comparison does not depend on a tokenizer.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "examples/common/program.h"
#include "runtime/error.h"
#include "runtime/io/output_file.h"
#include "runtime/io/safetensors.h"

using namespace gemlite;

namespace {

// "1, 5 ,17" or "1 5 17" -> {1, 5, 17}
std::vector<int> parse_ids(const std::string& text) {
  // "1,,403" is refused, as gemlite-bench refuses "-p 16,,32", not read as "1,403".
  for (size_t begin = 0; text.find(',') != std::string::npos && begin <= text.size();) {
    const size_t end = std::min(text.find(',', begin), text.size());
    if (text.find_first_not_of(" \t", begin) >= end) throw Error("--ids: '" + text + "' has an empty item");
    begin = end + 1;
  }
  std::string spaced = text;
  for (char& c : spaced)
    if (c == ',') c = ' ';
  std::istringstream in(spaced);
  std::vector<int> ids;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    int id = -1;
    try {
      id = std::stoi(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0) throw Error("--ids: '" + word + "' is not a token id");
    ids.push_back(id);
  }
  if (ids.empty()) throw Error("--ids: no token ids given");
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  return run_program("gemlite-logits", [&] {
    cxxopts::Options options("gemlite-logits", "Logits at every position of a prompt, saved as safetensors.");
    add_model_options(options);
    options.add_options()
        ("p,prompt", "Prompt text (tokenized with BOS)", cxxopts::value<std::string>())
        ("ids", "Token ids instead of a prompt, e.g. \"1,306,4997\"", cxxopts::value<std::string>())
        ("o,output", "Output .safetensors file", cxxopts::value<std::string>());
    const auto args = parse_args(options, argc, argv);
    if (!args.count("model")) throw Error("missing -m/--model DIR (see --help)");
    if (!args.count("output")) throw Error("missing -o/--output FILE (see --help)");
    // Before the model runs; an earlier run's safetensors file is replaced, nothing else.
    check_replaceable_output(args["output"].as<std::string>(), "a safetensors file", [](const std::string& existing) {
      try {
        (void)SafetensorsFile::open(existing);
        return true;
      } catch (const Error&) {
        return false;
      }
    });
    if (args.count("prompt") == args.count("ids")) throw Error("give exactly one of -p/--prompt and --ids");
    apply_thread_option(args);

    const std::string model_dir = args["model"].as<std::string>();
    const bool from_text = args.count("prompt") > 0;
    // The prompt is tokenized before the model is loaded, so that the KV cache is only as
    // long as the prompt (not the model's whole context: tens of GB for a 128k-context model).
    const PackedCheckpoint checkpoint = load_packed_checkpoint(model_dir);  // mapped: cheap
    const std::vector<int> ids =
        from_text ? load_checkpoint_tokenizer(checkpoint, model_dir).encode(args["prompt"].as<std::string>(), true)
                  : parse_ids(args["ids"].as<std::string>());
    if (int64_t(ids.size()) > checkpoint.config.max_seq_len)
      throw Error("the prompt has " + std::to_string(ids.size()) + " tokens; the model's context is " +
                  std::to_string(checkpoint.config.max_seq_len));
    LoadedModel loaded = load_model(model_dir, args["device"].as<std::string>(), std::max<int>(3, int(ids.size())),
                                    /*need_tokenizer=*/false, backend_options(args));

    std::vector<float> logits;  // [T, vocab]
    loaded.model->forward(ids, /*pos0=*/0, /*all_logits=*/true, logits);

    const int64_t T = int64_t(ids.size());
    const int vocab = loaded.checkpoint.config.vocab_size;
    SafetensorsWriter writer;
    writer.add("logits", HostTensor::copy_of(DType::F32, {T, vocab}, logits.data()));
    writer.add("ids", HostTensor::copy_of(DType::I32, {T}, ids.data()));
    writer.set_metadata("backend", loaded.backend->name());
    const std::string output = args["output"].as<std::string>();
    writer.write(output);
    std::printf("logits: %lld tokens x %d vocabulary on %s -> %s\n", static_cast<long long>(T), vocab,
                loaded.backend->name().c_str(), output.c_str());
    return 0;
  });
}
