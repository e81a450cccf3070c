#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "runtime/error.h"
#include "tests/cpu/tokenizer_test_models.h"

namespace gemlite {
namespace {

const std::string kSystem = "Be brief.";

struct ExpectedTurns {
  ChatTemplate chat_template;
  UserTurn first;   // with kSystem
  UserTurn second;  // "And 3+3?"
};

void expect_turn(const UserTurn& actual, const UserTurn& expected, const char* which) {
  EXPECT_EQ(actual.bos, expected.bos) << which;
  EXPECT_EQ(actual.text, expected.text) << which;
}

TEST(ChatTemplate, RendersFirstAndLaterTurnsExactly) {
  const ExpectedTurns cases[] = {
      {ChatTemplate::Completion, {true, "2+2?"}, {false, "And 3+3?"}},
      {ChatTemplate::Llama2,
       {true, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n2+2? [/INST]"},
       {true, "[INST] And 3+3? [/INST]"}},
      {ChatTemplate::Mistral,
       {true, "[INST] Be brief.\n\n2+2? [/INST]"},
       {false, "[INST] And 3+3? [/INST]"}},
      {ChatTemplate::Zephyr,
       {true, "<|system|>\nBe brief.</s>\n<|user|>\n2+2?</s>\n<|assistant|>\n"},
       {false, "<|user|>\nAnd 3+3?</s>\n<|assistant|>\n"}},
      {ChatTemplate::ChatML,
       {true,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"},
       {false, "<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"}},
      {ChatTemplate::Phi3,  // Phi-3's template: turns closed by <|end|>, BOS once
       {true, "<|system|>\nBe brief.<|end|>\n<|user|>\n2+2?<|end|>\n<|assistant|>\n"},
       {false, "<|user|>\nAnd 3+3?<|end|>\n<|assistant|>\n"}},
  };
  for (const ExpectedTurns& expected : cases) {
    SCOPED_TRACE(chat_template_name(expected.chat_template));
    expect_turn(render_user_turn(expected.chat_template, kSystem, "2+2?", true), expected.first,
                "first turn");
    expect_turn(render_user_turn(expected.chat_template, kSystem, "And 3+3?", false),
                expected.second, "second turn");
  }
}

TEST(ChatTemplate, FirstTurnWithoutSystemPromptHasNoSystemBlock) {
  EXPECT_EQ(render_user_turn(ChatTemplate::Llama2, "", "Hi", true).text, "[INST] Hi [/INST]");
  EXPECT_EQ(render_user_turn(ChatTemplate::Mistral, "", "Hi", true).text, "[INST] Hi [/INST]");
  EXPECT_EQ(render_user_turn(ChatTemplate::Zephyr, "", "Hi", true).text,
            "<|user|>\nHi</s>\n<|assistant|>\n");
  EXPECT_EQ(render_user_turn(ChatTemplate::ChatML, "", "Hi", true).text,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, AssistantEndClosesTheAnswer) {
  for (ChatTemplate eos_closed : {ChatTemplate::Llama2, ChatTemplate::Mistral}) {
    EXPECT_TRUE(render_assistant_end(eos_closed).eos_token);
    EXPECT_EQ(render_assistant_end(eos_closed).text, "");
  }
  EXPECT_FALSE(render_assistant_end(ChatTemplate::Zephyr).eos_token);
  EXPECT_EQ(render_assistant_end(ChatTemplate::Zephyr).text, "</s>\n");
  EXPECT_FALSE(render_assistant_end(ChatTemplate::ChatML).eos_token);
  EXPECT_EQ(render_assistant_end(ChatTemplate::ChatML).text, "<|im_end|>\n");
  EXPECT_FALSE(render_assistant_end(ChatTemplate::Phi3).eos_token);
  EXPECT_EQ(render_assistant_end(ChatTemplate::Phi3).text, "<|end|>\n");
  EXPECT_FALSE(render_assistant_end(ChatTemplate::Completion).eos_token);
  EXPECT_EQ(render_assistant_end(ChatTemplate::Completion).text, "");
}

TEST(ChatTemplate, ParsesEveryNameAndItsAlias) {
  for (ChatTemplate chat_template : {ChatTemplate::Completion, ChatTemplate::Llama2,
                                     ChatTemplate::Zephyr, ChatTemplate::Mistral,
                                     ChatTemplate::ChatML, ChatTemplate::Phi3}) {
    EXPECT_EQ(parse_chat_template(chat_template_name(chat_template)), chat_template);
  }
  EXPECT_EQ(parse_chat_template("tinyllama"), ChatTemplate::Zephyr);
}

TEST(ChatTemplate, UnknownNameErrorListsValidNames) {
  try {
    parse_chat_template("vicuna");
    FAIL() << "no error for an unknown template";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("vicuna"), std::string::npos) << message;
    for (const char* name : {"completion", "llama2", "zephyr", "tinyllama", "mistral", "chatml", "phi3"}) {
      EXPECT_NE(message.find(name), std::string::npos) << message;
    }
  }
}

// Excerpts of the Hugging Face chat templates of each family.
TEST(ChatTemplate, DetectsFormatFromJinjaTemplate) {
  const Tokenizer& tokenizer = llama2_tokenizer();
  EXPECT_EQ(detect_chat_template("{{'<|im_start|>' + message['role'] + '\\n'}}", "", tokenizer),
            ChatTemplate::ChatML);
  EXPECT_EQ(detect_chat_template("{{ '<|user|>\\n' + message['content'] + eos_token }}", "",
                                 tokenizer),
            ChatTemplate::Zephyr);
  EXPECT_EQ(detect_chat_template("{{ bos_token + '[INST] ' + '<<SYS>>\\n' + system }}", "",
                                 tokenizer),
            ChatTemplate::Llama2);
  EXPECT_EQ(detect_chat_template("{{ '[INST] ' + message['content'] + ' [/INST]' }}", "",
                                 tokenizer),
            ChatTemplate::Mistral);
  EXPECT_EQ(detect_chat_template("{{'<|user|>\n' + message['content'] + '<|end|>\n'}}", "", tokenizer),
            ChatTemplate::Phi3);
}

TEST(ChatTemplate, WithoutJinjaFallsBackToArchitectureThenCompletion) {
  EXPECT_EQ(detect_chat_template("", "Qwen2ForCausalLM", llama2_tokenizer()),
            ChatTemplate::ChatML);
  EXPECT_EQ(detect_chat_template("", "LlamaForCausalLM", llama2_tokenizer()),
            ChatTemplate::Completion);
  EXPECT_EQ(detect_chat_template("", "llama", stories_tokenizer()), ChatTemplate::Completion);
  EXPECT_EQ(detect_chat_template("", "phi3", stories_tokenizer()), ChatTemplate::Phi3);
}

// Llama 2's vocabulary has "</s>" as the EOS token but no "<|im_end|>" piece.
TEST(ChatTemplate, StopsOnEndMarkerAsTokenOrAsText) {
  const Tokenizer& tokenizer = llama2_tokenizer();
  const StopCondition zephyr = stop_condition(ChatTemplate::Zephyr, tokenizer);
  EXPECT_EQ(zephyr.token_ids, std::vector<int>{tokenizer.eos_id()});
  EXPECT_EQ(zephyr.texts, std::vector<std::string>{"</s>"});

  const StopCondition chatml = stop_condition(ChatTemplate::ChatML, tokenizer);
  EXPECT_EQ(chatml.token_ids, std::vector<int>{tokenizer.eos_id()});
  EXPECT_EQ(chatml.texts, std::vector<std::string>{"<|im_end|>"});

  const StopCondition llama2 = stop_condition(ChatTemplate::Llama2, tokenizer);
  EXPECT_EQ(llama2.token_ids, std::vector<int>{tokenizer.eos_id()});
  EXPECT_TRUE(llama2.texts.empty());
}

}  // namespace
}  // namespace gemlite
