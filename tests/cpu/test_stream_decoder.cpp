#include "tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/cpu/tokenizer_test_models.h"
#include "tokenizer/utf8.h"

namespace gemlite {
namespace {

const std::string kReplacementCharacter = "\xEF\xBF\xBD";

std::string stream(const Tokenizer& tokenizer, const std::vector<int>& ids) {
  StreamDecoder decoder(tokenizer);
  std::string text;
  for (int id : ids) text += decoder.push(id);
  return text + decoder.flush();
}

// Llama 2's vocabulary lacks "🙂", so it arrives as four byte tokens; the other
// characters are whole pieces ("日") or merged with letters ("afé").
TEST(StreamDecoder, MultibyteTextArrivesInWholeCharacters) {
  const Tokenizer& tokenizer = llama2_tokenizer();
  const std::string text = "naïve café — 日本語 🙂";
  const std::vector<int> ids = tokenizer.encode(text, true);
  ASSERT_TRUE(std::any_of(ids.begin(), ids.end(), [&](int id) { return tokenizer.is_byte(id); }))
      << "the text no longer exercises byte fallback";

  StreamDecoder decoder(tokenizer);
  std::string streamed;
  for (int id : ids) {
    const std::string chunk = decoder.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk)) << "chunk for id " << id << " splits a character";
    streamed += chunk;
  }
  EXPECT_EQ(decoder.flush(), "");
  EXPECT_EQ(streamed, tokenizer.decode(ids));
  EXPECT_EQ(streamed, text);
}

TEST(StreamDecoder, DropsTheDummyPrefixSpaceOnlyAfterBos) {
  const Tokenizer& tokenizer = stories_tokenizer();
  const std::vector<int> once_upon = tokenizer.encode("Once upon", false);
  std::vector<int> after_bos = once_upon;
  after_bos.insert(after_bos.begin(), tokenizer.bos_id());
  EXPECT_EQ(stream(tokenizer, after_bos), "Once upon");
  EXPECT_EQ(stream(tokenizer, once_upon), " Once upon");
}

TEST(StreamDecoder, ControlTokensPrintNothing) {
  StreamDecoder decoder(stories_tokenizer());
  EXPECT_EQ(decoder.push(stories_tokenizer().bos_id()), "");
  EXPECT_EQ(decoder.push(stories_tokenizer().eos_id()), "");
  // A model padded past its tokenizer (Phi-3: 32064 rows for 32011 pieces) may sample a
  // padding id: no text, and no error mid-answer.
  EXPECT_EQ(decoder.push(stories_tokenizer().vocab_size()), "");
  EXPECT_EQ(decoder.push(stories_tokenizer().vocab_size() + 7), "");
}

TEST(StreamDecoder, UnfinishedCharacterBecomesReplacementCharacters) {
  const Tokenizer& tokenizer = llama2_tokenizer();
  const int first_byte_of_smiley = tokenizer.piece_to_id("<0xF0>");
  const int second_byte_of_smiley = tokenizer.piece_to_id("<0x9F>");

  StreamDecoder flushed(tokenizer);
  EXPECT_EQ(flushed.push(first_byte_of_smiley), "");
  EXPECT_EQ(flushed.push(second_byte_of_smiley), "");
  EXPECT_EQ(flushed.flush(), kReplacementCharacter + kReplacementCharacter);

  // A text piece means the held bytes can never complete; sentencepiece agrees.
  const std::vector<int> cut_short = {first_byte_of_smiley, tokenizer.piece_to_id("▁the")};
  EXPECT_EQ(stream(tokenizer, cut_short), kReplacementCharacter + " the");
  EXPECT_EQ(tokenizer.decode(cut_short), kReplacementCharacter + " the");
}

}  // namespace
}  // namespace gemlite
