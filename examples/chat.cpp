// gemlite-chat: interactive streaming chat with a packed model, or one-shot completion.
//   gemlite-chat -m DIR                      chat, the model's template, "> " prompt
//   gemlite-chat -m DIR -p "Once upon a time" -n 64 --temp 0
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "examples/common/generation.h"
#include "examples/common/program.h"
#include "runtime/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"

using namespace gemlite;

namespace {

// First Ctrl-C stops the answer being generated; a second one (or one at the prompt)
// exits with 130 like llama-cli.
std::atomic<bool> g_generating{false}, g_interrupted{false};
void on_interrupt(int) {
  if (g_generating && !g_interrupted) {
    g_interrupted = true;
    return;
  }
  _exit(130);
}

// Timings of one answer, on the backend's clock: every interval ends once the GPU is done
// (prefill waits for the backend; each decode step ends with the sampled id on the host).
struct Speed {
  int prompt_tokens = 0, decode_runs = 0;
  double prompt_seconds = 0;       // feeding the prompt
  double first_token_seconds = 0;  // prompt start -> first sampled id (time to first token)
  double decode_seconds = 0;       // first id -> last id: decode_runs forwards and samples
  double prompt_started_at = 0;
  double generated_per_second() const { return decode_runs / std::max(decode_seconds, 1e-9); }
  void print() const {
    std::fprintf(stderr, "\n[ Prompt: %.1f t/s | Generation: %.1f t/s ]\n",
                 prompt_tokens / std::max(prompt_seconds, 1e-9), generated_per_second());
  }
  // llama.cpp's llama_perf_context_print lines; "eval" is decode, comparable with
  // gemlite-bench's tg (which starts from an empty context, this one after the prompt).
  void print_perf() const {
    std::fprintf(stderr, "gemlite_perf: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
                 prompt_seconds * 1e3, prompt_tokens, prompt_seconds * 1e3 / std::max(prompt_tokens, 1),
                 prompt_tokens / std::max(prompt_seconds, 1e-9));
    std::fprintf(stderr, "gemlite_perf:        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f tokens per second)\n",
                 decode_seconds * 1e3, decode_runs, decode_seconds * 1e3 / std::max(decode_runs, 1),
                 generated_per_second());
    std::fprintf(stderr, "gemlite_perf: time to first token = %10.2f ms\n", first_token_seconds * 1e3);
  }
};

struct Answer {
  std::vector<int> ids;          // fed to the cache, without a stop token
  bool ended_by_marker = false;  // the template's end marker came as text and was fed
  bool context_full = false;     // cut by a full context before EOS or n_predict
};

// Samples, prints and feeds tokens until EOS, a stop marker, n_predict tokens, a full
// context or Ctrl-C.
Answer generate_answer(Generation& generation, Sampler& sampler, const Tokenizer& tokenizer,
                                 const StopCondition& stop, int n_predict, Speed& speed) {
  StreamDecoder decoder(tokenizer);
  Answer answer;
  std::string text;
  int samples = 0;
  double first_sample_at = 0, last_sample_at = 0;
  g_generating = true;
  while (n_predict < 0 || int(answer.ids.size()) < n_predict) {
    if (g_interrupted) break;
    if (generation.room() == 0) {
      std::fprintf(stderr, "\n[context full after %d tokens: answer cut; raise -c/--ctx-size]\n",
                   generation.position());
      answer.context_full = true;
      break;
    }
    const int id = generation.sample(sampler);  // waits for the forward that made the logits
    last_sample_at = now_seconds();
    if (samples++ == 0) first_sample_at = last_sample_at;
    if (id == tokenizer.eos_id() ||
        std::find(stop.token_ids.begin(), stop.token_ids.end(), id) != stop.token_ids.end())
      break;
    answer.ids.push_back(id);
    const std::string piece = decoder.push(id);
    text += piece;
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
    generation.feed({id});
    for (const auto& marker : stop.texts) {
      const size_t search_from = text.size() - std::min(text.size(), piece.size() + marker.size());
      answer.ended_by_marker |= text.find(marker, search_from) != std::string::npos;
    }
    if (answer.ended_by_marker) break;
  }
  std::fputs(decoder.flush().c_str(), stdout);
  std::fflush(stdout);
  g_generating = false;
  g_interrupted = false;
  // Each sample after the first closed one decode step (a forward, then its sample).
  speed.first_token_seconds = samples > 0 ? first_sample_at - speed.prompt_started_at : 0;
  speed.decode_runs = std::max(0, samples - 1);
  speed.decode_seconds = last_sample_at - first_sample_at;
  return answer;
}

void feed_timed(Generation& generation, const std::vector<int>& ids, Speed& speed) {
  g_generating = true;  // Ctrl-C while the prompt is fed stops this answer, not the program
  speed.prompt_started_at = now_seconds();
  generation.feed(ids);
  generation.wait();
  speed.prompt_tokens = int(ids.size());
  speed.prompt_seconds = now_seconds() - speed.prompt_started_at;
}

// `model_eos`: the model config's end-of-sequence id, which may differ from the tokenizer's
// (Phi-3: 32000 <|endoftext|> beside sentencepiece's </s>); generation stops at either.
// `ids`: the prompt's tokens, which the caller checked fit the context. Exit code 1 when
// the context filled before the -n tokens asked for (the "[context full ...]" line says
// so); with -n -1 a full context is one of the ends asked for.
int complete_once(Generation& generation, Sampler& sampler, const Tokenizer& tokenizer, const std::string& prompt,
                  const std::vector<int>& ids, int n_predict, int model_eos) {
  Speed speed;
  feed_timed(generation, ids, speed);
  std::fputs(prompt.c_str(), stdout);
  const Answer answer =
      generate_answer(generation, sampler, tokenizer, StopCondition{{model_eos}, {}}, n_predict, speed);
  std::fputs("\n", stdout);
  speed.print();
  speed.print_perf();
  return answer.context_full && n_predict > 0 ? 1 : 0;
}

// One exchange kept for re-feeding when the context fills: its tokens in cache order.
using Exchange = std::vector<int>;

// Makes room for `needed` more positions by dropping the oldest exchanges after the first
// (which carries the system prompt, like llama-cli's --keep) and re-feeding the rest
// (llama-cli shifts the cache instead; re-feeding is simpler and rare).
void make_room(Generation& generation, std::deque<Exchange>& history, int needed, const Tokenizer& tokenizer) {
  if (generation.room() >= needed) return;
  const int context = generation.position() + generation.room();
  if (1 + needed > context)
    throw Error("this message and its answer (" + std::to_string(needed) +
                " tokens) do not fit in the context of " + std::to_string(context) +
                " (raise -c/--ctx-size)");
  auto kept_tokens = [&] {
    int n = 1;  // the BOS that starts the re-fed sequence
    for (const auto& exchange : history) n += int(exchange.size());
    return n;
  };
  while (history.size() > 1 && kept_tokens() + needed > context) history.erase(history.begin() + 1);
  if (!history.empty() && kept_tokens() + needed > context) history.pop_front();
  std::vector<int> ids;
  for (const auto& exchange : history) ids.insert(ids.end(), exchange.begin(), exchange.end());
  if (ids.empty() || ids.front() != tokenizer.bos_id()) ids.insert(ids.begin(), tokenizer.bos_id());
  std::fprintf(stderr, "[context full: dropped the oldest turns]\n");
  generation.reset();
  generation.feed(ids);
}

// The template a checkpoint's config.json names (gemlite_chat_template); an unknown name is
// an error naming that file.
ChatTemplate recorded_chat_template(const std::string& name, const std::string& model_dir) {
  try {
    return parse_chat_template(name);
  } catch (const Error& e) {
    fail((std::filesystem::path(model_dir) / "config.json").string(), std::string("gemlite_chat_template: ") + e.what());
  }
}

int chat(Generation& generation, Sampler& sampler, const Tokenizer& tokenizer, ChatTemplate chat_template,
         const std::string& system, int n_predict, int model_eos) {
  const bool terminal = isatty(STDIN_FILENO);
  StopCondition stop = stop_condition(chat_template, tokenizer);
  stop.token_ids.push_back(model_eos);  // as in complete_once
  std::deque<Exchange> history;
  bool first_turn = true;
  // A system prompt that leaves no room in the context would fail every turn, since each
  // failed first turn is tried again with it: refuse it once, up front.
  if (!system.empty()) {
    const int context = generation.position() + generation.room();
    const int prompt = 1 + int(tokenizer.encode(render_user_turn(chat_template, system, "", true).text, false).size());
    if (prompt + context / 4 > context)
      throw Error("-sys/--system-prompt takes " + std::to_string(prompt) + " tokens, leaving no room for a message "
                  "and its answer in the context of " + std::to_string(context) + " (raise -c/--ctx-size)");
  }
  std::string line;
  int refused_turns = 0;  // piped turns that did not fit: the exit code says so at the end
  for (;;) {
    if (terminal) std::fputs("> ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line)) {  // EOF ends the chat
      if (terminal) std::fputs("\n", stdout);  // the shell's prompt on a line of its own
      break;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // nothing said

    const UserTurn turn = render_user_turn(chat_template, system, line, first_turn);
    Exchange exchange;
    if (turn.bos) exchange.push_back(tokenizer.bos_id());
    const std::vector<int> text = tokenizer.encode(turn.text, false);
    exchange.insert(exchange.end(), text.begin(), text.end());
    // Keep room for an answer: n_predict tokens, at most a quarter of the context.
    const int context = generation.position() + generation.room();
    const int answer_room = n_predict > 0 ? std::min(n_predict, context / 4) : context / 4;
    try {
      make_room(generation, history, int(exchange.size()) + answer_room, tokenizer);
    } catch (const Error& e) {  // a message too long for the context: say so, keep chatting
      std::fprintf(stderr, "gemlite-chat: error: %s\n", e.what());
      ++refused_turns;
      continue;
    }

    Speed speed;
    feed_timed(generation, exchange, speed);
    const Answer answer = generate_answer(generation, sampler, tokenizer, stop, n_predict, speed);
    std::fputs("\n", stdout);  // each answer a line of its own (piped turns ran together)
    exchange.insert(exchange.end(), answer.ids.begin(), answer.ids.end());
    const AssistantEnd end = render_assistant_end(chat_template);
    std::vector<int> closing;
    if (end.eos_token) closing.push_back(tokenizer.eos_id());
    if (!end.text.empty() && !answer.ended_by_marker) {
      const auto end_ids = tokenizer.encode(end.text, false);
      closing.insert(closing.end(), end_ids.begin(), end_ids.end());
    }
    if (int(closing.size()) <= generation.room()) generation.feed(closing);
    exchange.insert(exchange.end(), closing.begin(), closing.end());
    history.push_back(std::move(exchange));
    first_turn = false;
    speed.print();
  }
  // At a terminal the user saw each refusal and went on; a script piping its turns learns
  // from the exit code that some went unanswered.
  if (!terminal && refused_turns > 0) {
    std::fprintf(stderr, "gemlite-chat: error: %d turn%s from stdin not answered (above)\n", refused_turns,
                 refused_turns == 1 ? "" : "s");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_program("gemlite-chat", [&] {
    cxxopts::Options options("gemlite-chat",
        "Chat with a gemlite packed model (reads turns from stdin; EOF or Ctrl-C twice ends), "
        "or complete one prompt with -p.");
    add_model_options(options);
    options.add_options()
        ("p,prompt", "Complete this text once (no chat template) and exit; -p '' samples from BOS alone",
         cxxopts::value<std::string>())
        ("f,file", "Complete the text of this file once, like -p", cxxopts::value<std::string>())
        ("n,n-predict", "Tokens to generate per answer (-1 = until EOS or a full context)",
         cxxopts::value<int>()->default_value("-1"))
        ("c,ctx-size", "Context size in tokens (0 = the model's; default: 4096, or the model's if shorter)",
         cxxopts::value<int>())
        ("temp", "Temperature (0 = greedy)", cxxopts::value<float>()->default_value("0.8"))
        ("top-k", "Top-k sampling (0 = off)", cxxopts::value<int>()->default_value("40"))
        ("top-p", "Top-p sampling (1 = off)", cxxopts::value<float>()->default_value("0.95"))
        ("min-p", "Min-p sampling (0 = off)", cxxopts::value<float>()->default_value("0.05"))
        ("repeat-penalty", "Penalty for repeated tokens (1 = off)", cxxopts::value<float>()->default_value("1.0"))
        ("repeat-last-n", "Tokens the repeat penalty looks back over (0 = none, -1 = the whole context)",
         cxxopts::value<int>()->default_value("64"))
        ("s,seed", "Random seed (-1 = random)", cxxopts::value<int64_t>()->default_value("-1"))
        ("system-prompt", "System prompt for chat (also -sys)", cxxopts::value<std::string>()->default_value(""))
        ("no-escape", "Take -p and -sys as written (by default \\n, \\t, \\\\, \\xHH ... are read, as llama-cli does)")
        ("chat-template", "completion, llama2, zephyr (tinyllama), mistral, chatml or phi3 (default: from the model)",
         cxxopts::value<std::string>());
    const auto args = parse_args(options, argc, argv, {{"-sys", "--system-prompt"}});
    if (!args.count("model")) throw Error("missing -m/--model DIR (see --help)");
    if (args["n-predict"].as<int>() < -1) throw Error("-n/--n-predict must be -1 (no limit) or >= 0");
    if (args["repeat-penalty"].as<float>() <= 0) throw Error("--repeat-penalty must be > 0 (1 = off)");
    // llama-cli's ranges: top-p and min-p are probabilities, -1 the only negative count or seed.
    for (const char* probability : {"top-p", "min-p"}) {
      const float value = args[probability].as<float>();
      char text[32];
      std::snprintf(text, sizeof text, "%g", value);
      if (value < 0 || value > 1) throw Error(std::string("--") + probability + " " + text + ": expected 0 .. 1");
    }
    if (args["repeat-last-n"].as<int>() < -1)
      throw Error("--repeat-last-n must be -1 (the whole context), 0 (none) or more");
    if (args["seed"].as<int64_t>() < -1) throw Error("-s/--seed must be -1 (random) or >= 0");
    if (args.count("prompt") && args.count("file")) throw Error("-p and -f both give a prompt; use one");
    // Read before the model loads: a bad path costs nothing.
    const std::string file_prompt = args.count("file") ? read_text_file(args["file"].as<std::string>()) : "";
    // Escapes are read in the command line's texts, not in a file's (-f) or stdin's.
    const auto typed = [&](const std::string& text) { return args.count("no-escape") ? text : process_escapes(text); };
    const std::string prompt = args.count("prompt") ? typed(args["prompt"].as<std::string>()) : file_prompt;
    const std::string system = typed(args["system-prompt"].as<std::string>());
    const std::optional<ChatTemplate> given_template =
        args.count("chat-template") ? std::optional<ChatTemplate>(parse_chat_template(args["chat-template"].as<std::string>()))
                                    : std::nullopt;
    apply_thread_option(args);

    SamplerParams params;
    params.temperature = args["temp"].as<float>();
    params.top_k = args["top-k"].as<int>();
    params.top_p = args["top-p"].as<float>();
    params.min_p = args["min-p"].as<float>();
    params.repeat_penalty = args["repeat-penalty"].as<float>();
    params.repeat_last_n = args["repeat-last-n"].as<int>();
    const int64_t seed = args["seed"].as<int64_t>();
    params.seed = seed < 0 ? uint64_t(now_seconds() * 1e6) : uint64_t(seed);
    Sampler sampler(params);

    const int context = args.count("ctx-size") ? args["ctx-size"].as<int>() : kDefaultContext;
    if (args.count("ctx-size") && context < 0) throw Error("--ctx-size must be >= 0 (0 = the model's)");
    LoadedModel loaded = load_model(args["model"].as<std::string>(), args["device"].as<std::string>(), context,
                                    /*need_tokenizer=*/true, backend_options(args));
    const auto print_context = [&] {
      std::fprintf(stderr, "context: %d positions (the model's: %d)\n", loaded.model->context(),
                   loaded.checkpoint.config.max_seq_len);
    };
    Generation generation(*loaded.model);
    std::signal(SIGINT, on_interrupt);
    const int n_predict = args["n-predict"].as<int>();
    if (args.count("prompt") || args.count("file")) {
      if (!system.empty()) std::fprintf(stderr, "warning: -sys/--system-prompt is not used with -p/-f (no chat template)\n");
      if (given_template) std::fprintf(stderr, "warning: --chat-template is not used with -p/-f (plain completion)\n");
      const std::vector<int> ids = loaded.tokenizer->encode(prompt, /*add_bos=*/true);
      if (int(ids.size()) > generation.room())
        fail(args.count("file") ? args["file"].as<std::string>() : "-p/--prompt",
             "the prompt's " + std::to_string(ids.size()) + " tokens do not fit in the context of " +
                 std::to_string(generation.room()) + " positions (raise -c/--ctx-size)");
      print_context();
      return complete_once(generation, sampler, *loaded.tokenizer, prompt, ids, n_predict,
                           loaded.checkpoint.config.eos_id);
    }

    const ChatTemplate chat_template =
        given_template ? *given_template
        : !loaded.checkpoint.chat_template.empty() ? recorded_chat_template(loaded.checkpoint.chat_template, args["model"].as<std::string>())
        : detect_chat_template("", loaded.checkpoint.config.architecture, *loaded.tokenizer);
    print_context();
    std::fprintf(stderr, "chat template: %s; end with Ctrl-D (EOF), stop an answer with Ctrl-C\n",
                 chat_template_name(chat_template));
    if (!system.empty() && chat_template == ChatTemplate::Completion)
      std::fprintf(stderr, "warning: -sys/--system-prompt is not used: the completion template has no system turn\n");
    return chat(generation, sampler, *loaded.tokenizer, chat_template, system, n_predict,
                loaded.checkpoint.config.eos_id);
  });
}
