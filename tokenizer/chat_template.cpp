#include "tokenizer/chat_template.h"

#include <algorithm>
#include <cctype>

#include "runtime/error.h"

namespace gemlite {
namespace {

struct NamedTemplate {
  const char* name;
  ChatTemplate chat_template;
};

// The first name of each template is its canonical one.
constexpr NamedTemplate kNamedTemplates[] = {
    {"completion", ChatTemplate::Completion}, {"llama2", ChatTemplate::Llama2},
    {"zephyr", ChatTemplate::Zephyr},         {"tinyllama", ChatTemplate::Zephyr},
    {"mistral", ChatTemplate::Mistral},       {"chatml", ChatTemplate::ChatML},
    {"phi3", ChatTemplate::Phi3},
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// The marker that closes an assistant answer in the template's text, if it has one.
std::string end_marker(ChatTemplate chat_template) {
  switch (chat_template) {
    case ChatTemplate::Zephyr: return "</s>";
    case ChatTemplate::ChatML: return "<|im_end|>";
    case ChatTemplate::Phi3: return "<|end|>";
    default: return "";
  }
}

// Llama 2 and Mistral have no system turn: the system prompt goes inside the first
// [INST] block (Mistral's instruct models were never trained with one, so their format
// simply prepends it).
std::string render_inst_block(ChatTemplate chat_template, const std::string& system,
                              const std::string& user) {
  std::string message = user;
  if (!system.empty()) {
    message = chat_template == ChatTemplate::Llama2
                  ? "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + user
                  : system + "\n\n" + user;
  }
  return "[INST] " + message + " [/INST]";
}

}  // namespace

ChatTemplate parse_chat_template(const std::string& name) {
  std::string valid_names;
  for (const NamedTemplate& named : kNamedTemplates) {
    if (name == named.name) return named.chat_template;
    valid_names += valid_names.empty() ? named.name : std::string(", ") + named.name;
  }
  fail("chat template '" + name + "'", "unknown; valid names are " + valid_names);
}

const char* chat_template_name(ChatTemplate chat_template) {
  for (const NamedTemplate& named : kNamedTemplates) {
    if (named.chat_template == chat_template) return named.name;
  }
  return "unknown";
}

ChatTemplate detect_chat_template(const std::string& hf_chat_template_jinja,
                                  const std::string& architecture, const Tokenizer& tokenizer) {
  const std::string& jinja = hf_chat_template_jinja;
  if (contains(jinja, "<|im_start|>")) return ChatTemplate::ChatML;
  // Phi-3 closes turns with <|end|> where Zephyr writes the eos token.
  if (contains(jinja, "<|user|>") && contains(jinja, "<|end|>")) return ChatTemplate::Phi3;
  if (contains(jinja, "<|user|>")) return ChatTemplate::Zephyr;
  // Llama 2's template also contains [INST], so <<SYS>> must be checked first.
  if (contains(jinja, "<<SYS>>")) return ChatTemplate::Llama2;
  if (contains(jinja, "[INST]")) return ChatTemplate::Mistral;
  // Every Qwen checkpoint, base ones included, ships ChatML as its template.
  if (contains(lowercase(architecture), "qwen")) return ChatTemplate::ChatML;
  if (tokenizer.piece_to_id("<|im_start|>") >= 0) return ChatTemplate::ChatML;
  // Phi-3 base and instruct share the markers (tokenizer.json's added tokens).
  if (lowercase(architecture) == "phi3" || tokenizer.piece_to_id("<|end|>") >= 0) return ChatTemplate::Phi3;
  return ChatTemplate::Completion;
}

UserTurn render_user_turn(ChatTemplate chat_template, const std::string& system,
                          const std::string& user, bool first_turn) {
  const std::string turn_system = first_turn ? system : "";
  switch (chat_template) {
    case ChatTemplate::Completion:
      return {first_turn, user};
    // Llama 2 was trained with each [INST] exchange as its own BOS..EOS sequence,
    // Mistral with one BOS at the start of the conversation.
    case ChatTemplate::Llama2:
      return {true, render_inst_block(chat_template, turn_system, user)};
    case ChatTemplate::Mistral:
      return {first_turn, render_inst_block(chat_template, turn_system, user)};
    case ChatTemplate::Zephyr:
      return {first_turn,
              (turn_system.empty() ? "" : "<|system|>\n" + turn_system + "</s>\n") +
                  "<|user|>\n" + user + "</s>\n<|assistant|>\n"};
    case ChatTemplate::ChatML:
      return {first_turn,
              (turn_system.empty() ? "" : "<|im_start|>system\n" + turn_system + "<|im_end|>\n") +
                  "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"};
    case ChatTemplate::Phi3:
      return {first_turn, (turn_system.empty() ? "" : "<|system|>\n" + turn_system + "<|end|>\n") + "<|user|>\n" +
                              user + "<|end|>\n<|assistant|>\n"};
  }
  return {first_turn, user};
}

AssistantEnd render_assistant_end(ChatTemplate chat_template) {
  switch (chat_template) {
    case ChatTemplate::Llama2:
    case ChatTemplate::Mistral: return {true, ""};
    case ChatTemplate::Zephyr:
    case ChatTemplate::ChatML:
    case ChatTemplate::Phi3: return {false, end_marker(chat_template) + "\n"};
    case ChatTemplate::Completion: return {false, ""};
  }
  return {false, ""};
}

StopCondition stop_condition(ChatTemplate chat_template, const Tokenizer& tokenizer) {
  StopCondition stop{{tokenizer.eos_id()}, {}};
  const std::string marker = end_marker(chat_template);
  if (marker.empty()) return stop;
  // The turns feed the marker as text, so the model may well write it back as text.
  stop.texts.push_back(marker);
  const int marker_id = tokenizer.piece_to_id(marker);
  if (marker_id >= 0 && marker_id != tokenizer.eos_id()) stop.token_ids.push_back(marker_id);
  return stop;
}

}  // namespace gemlite
