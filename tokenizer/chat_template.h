#pragma once
// The prompt formats of the chat models gemlite runs, rendered one turn at a time: each
// call gives only the new text of a turn, so the KV cache of the earlier turns is reused.
//
// A conversation is fed as:
//   for each turn:  [BOS if turn.bos] encode(turn.text)  -> generate until a stop
//                   [EOS if end.eos_token] encode(end.text)  where end = render_assistant_end
// The template's end marker is not fed by generation (sampling it stops generation before
// it is fed), so the caller appends the whole of render_assistant_end itself.
//
// Markers such as "</s>" inside a template's text are encoded by sentencepiece as plain
// characters, not as the control token that Hugging Face's tokenizers would map them to;
// markers that are user-defined pieces of the tokenizer.model (Phi-3's <|user|>, <|end|>
// in a packed checkpoint made from tokenizer.json's added tokens) are encoded whole.
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace gemlite {

enum class ChatTemplate { Completion, Llama2, Zephyr, Mistral, ChatML, Phi3 };

// Names: completion, llama2, zephyr (alias tinyllama), mistral, chatml, phi3.
// Throws Error("chat template '<name>': unknown; valid names are ...") otherwise.
ChatTemplate parse_chat_template(const std::string& name);
const char* chat_template_name(ChatTemplate chat_template);

// Guesses the format from the model's Hugging Face jinja chat template (may be empty),
// its architecture ("LlamaForCausalLM", "qwen2", ...) and vocabulary. Base models without
// chat markers get Completion.
ChatTemplate detect_chat_template(const std::string& hf_chat_template_jinja,
                                  const std::string& architecture, const Tokenizer& tokenizer);

struct UserTurn {
  bool bos;          // feed the BOS token before `text`
  std::string text;  // the turn, ending with the prefix that makes the model answer
};
// `system` may be empty; it is only rendered in the first turn. Completion feeds `user`
// as is and has no place for `system`.
UserTurn render_user_turn(ChatTemplate chat_template, const std::string& system,
                          const std::string& user, bool first_turn);

struct AssistantEnd {
  bool eos_token;    // feed the EOS token id first
  std::string text;  // then this text
};
// What closes the assistant's answer before the next user turn.
AssistantEnd render_assistant_end(ChatTemplate chat_template);

// When to stop generating an answer: on EOS, on the template's end marker ("<|im_end|>",
// "</s>", "<|end|>") as a token when the vocabulary has it as one, and when the streamed text shows it.
struct StopCondition {
  std::vector<int> token_ids;
  std::vector<std::string> texts;
};
StopCondition stop_condition(ChatTemplate chat_template, const Tokenizer& tokenizer);

}  // namespace gemlite
