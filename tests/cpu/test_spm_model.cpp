// Sentencepiece models built from bare vocabularies (tokenizer/spm_model.h), against the
// real sentencepiece model of the same vocabulary: stories260K's tok512.bin (llama2.c
// layout) and the vocabulary inside stories260K.gguf must tokenize text exactly like
// tok512.model, and aidreams260K's tokenizer.bin (which has no .model) must round-trip
// text, byte-fallback characters and whitespace runs included.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>

#include "models/import_gguf.h"
#include "runtime/error.h"
#include "tests/cpu/test_files.h"
#include "tokenizer/spm_model.h"
#include "tokenizer/tokenizer.h"

namespace gemlite {
namespace {

const std::string kTok512Model = shared_file("models/stories260K/tok512.model");
const std::string kTok512Bin = shared_file("models/stories260K/tok512.bin");
const std::string kAidreamsBin = shared_file("models/aidreams260K/aidreams_tok512.bin");

Tokenizer built_tokenizer(const std::vector<SpmPiece>& pieces) {
  const std::string path = make_temp_dir() + "/built.model";
  std::ofstream(path, std::ios::binary) << spm_bpe_model_proto(pieces, "test vocabulary");
  return Tokenizer::load(path);
}

// The lines of the TinyStories sample with whitespace runs made single spaces and ends
// trimmed: tok512.model (trained with sentencepiece's defaults) collapses runs, while a
// built model keeps them as llama.cpp does; on such lines the two must agree exactly.
std::vector<std::string> sample_lines() {
  std::ifstream in(shared_file("data/tinystories/tinystories_sample.txt"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string word, clean;
    while (words >> word) clean += (clean.empty() ? "" : " ") + word;
    if (!clean.empty()) lines.push_back(clean);
  }
  return lines;
}

void expect_same_tokens(const Tokenizer& built, const Tokenizer& reference) {
  const std::vector<std::string> lines = sample_lines();
  ASSERT_GT(lines.size(), 10u);
  EXPECT_EQ(built.vocab_size(), reference.vocab_size());
  for (const std::string& line : lines) {
    EXPECT_EQ(built.encode(line, true), reference.encode(line, true)) << line;
    EXPECT_EQ(built.decode(built.encode(line, false)), line);
  }
}

TEST(SpmModel, Llama2cTokenizerBinTokenizesLikeItsSentencepieceModel) {
  const Tokenizer built = built_tokenizer(read_llama2c_tokenizer(kTok512Bin, 512));
  EXPECT_EQ(built.encode("Once upon a time, there was a little girl named Lily.", false),
            (std::vector<int>{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426}));
  EXPECT_EQ(built.bos_id(), 1);
  EXPECT_EQ(built.eos_id(), 2);
  EXPECT_TRUE(built.is_byte(3 + 0x41));  // <0x41>
  expect_same_tokens(built, Tokenizer::load(kTok512Model));
}

TEST(SpmModel, GgufVocabularyTokenizesLikeTheSentencepieceModel) {
  const SourceModel gguf = load_gguf(shared_file("models/stories260K/stories260K.gguf"));
  ASSERT_EQ(gguf.vocabulary.size(), 512u) << gguf.vocabulary_problem;
  expect_same_tokens(built_tokenizer(gguf.vocabulary), Tokenizer::load(kTok512Model));
}

// tokenizer.json's added tokens appended to tok512.model (ids 512 and 514; 513 named by none
// becomes an unused piece; an added token re-declaring id 2 is the model's own </s>): the
// markers tokenize whole wherever they stand, and the text around them as before.
TEST(SpmModel, AddedTokensBecomeWholePiecesAfterTheModelsOwn) {
  std::ifstream in(kTok512Model, std::ios::binary);
  const std::string proto((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<std::pair<int, std::string>> added = {{2, "</s>"}, {514, "<|end|>"}, {512, "<|user|>"}};
  const std::string path = make_temp_dir() + "/added.model";
  const Tokenizer base = Tokenizer::load(kTok512Model);
  std::ofstream(path, std::ios::binary) << spm_model_with_added_tokens(proto, base, 520, added, "tokenizer.json");
  const Tokenizer tokenizer = Tokenizer::load(path);
  EXPECT_EQ(tokenizer.vocab_size(), 515);
  EXPECT_EQ(tokenizer.piece(512), "<|user|>");
  EXPECT_EQ(tokenizer.piece(514), "<|end|>");
  EXPECT_EQ(tokenizer.piece_to_id("<|end|>"), 514);
  EXPECT_EQ(tokenizer.piece(2), "</s>");

  EXPECT_EQ(spm_user_defined_pieces(spm_model_with_added_tokens(proto, base, 520, added, "t"), "t"),
            (std::vector<std::pair<int, std::string>>{{512, "<|user|>"}, {514, "<|end|>"}}));

  // The text between markers is encoded on its own, with its dummy-prefix space, as
  // llama.cpp encodes text after special tokens; a marker at the start gets no space.
  const auto cat = [](std::vector<std::vector<int>> parts) {
    std::vector<int> all;
    for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
    return all;
  };
  EXPECT_EQ(tokenizer.encode("Hello there<|end|>", false), cat({base.encode("Hello there", false), {514}}));
  EXPECT_EQ(tokenizer.encode("<|user|>\nHi<|end|>\n", true),
            cat({{1, 512}, base.encode("\nHi", false), {514}, base.encode("\n", false)}));
  EXPECT_EQ(base.encode("Once upon a time", true), tokenizer.encode("Once upon a time", true));
  // Phi-3's markers strip the whitespace after them (tokenizer.json's "rstrip"): its chat
  // turn "<|user|>\nHi<|end|>\n<|assistant|>\n" becomes <|user|> ▁Hi <|end|> <|assistant|>.
  Tokenizer stripping = Tokenizer::load(path);
  stripping.set_rstrip({512, 514});
  EXPECT_EQ(stripping.encode("<|user|>\nHi<|end|>\n<|user|>  \n", false),
            cat({{512}, base.encode("Hi", false), {514, 512}}));
  EXPECT_THROW(stripping.set_rstrip({300}), Error);  // not a marker
  // Markers have no text.
  EXPECT_TRUE(tokenizer.is_control(512));
  EXPECT_EQ(tokenizer.decode(cat({{512}, base.encode("Hi", false), {514}})), "Hi");

  // Each of these would have made a tokenizer that fails to load or to encode, or that
  // means something else than tokenizer.json says; all are errors naming it.
  const std::vector<std::vector<std::pair<int, std::string>>> bad = {
      {{512, "<|a|>"}, {512, "<|b|>"}},  // an id twice
      {{512, "<|a|>"}, {513, "<|a|>"}},  // a text twice
      {{513, ""}},                       // empty
      {{513, std::string("a\0b", 3)}},   // a NUL
      {{513, "<s>"}},                    // already a (control) piece of the model
      {{513, base.piece(300)}},          // already a normal piece
      {{2, "<|end|>"}},                  // the model's own id with another text
      {{513, "<gemlite_unused_513>"}},   // a filler's name
  };
  // An id past the model's rows (a <pad> some repositories add) is skipped, not a marker.
  EXPECT_EQ(spm_model_with_added_tokens(proto, base, 520, {{520, "<pad>"}}, "t"), proto);
  for (const auto& tokens : bad) {
    try {
      spm_model_with_added_tokens(proto, base, 520, tokens, "dir/tokenizer.json");
      ADD_FAILURE() << "accepted " << tokens[0].first << " '" << tokens[0].second << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dir/tokenizer.json"), std::string::npos) << e.what();
    }
  }
}

TEST(SpmModel, AidreamsTokenizerRoundTripsTextBytesAndSpaceRuns) {
  ASSERT_TRUE(is_llama2c_tokenizer(kAidreamsBin));  // its max_token_length is 10 = 0x0A
  ASSERT_FALSE(is_llama2c_tokenizer(kTok512Model));
  const Tokenizer built = built_tokenizer(read_llama2c_tokenizer(kAidreamsBin, 512));
  for (const std::string text : {"Once upon a time, a dream.", "two  spaces and\ta tab", "caf\xc3\xa9 \xf0\x9f\x98\x80 \xce\xbb"}) {
    const std::vector<int> ids = built.encode(text, true);
    EXPECT_EQ(ids.front(), 1);
    EXPECT_EQ(built.decode(ids), text);
  }
  // Byte fallback: a character outside the vocabulary becomes its UTF-8 bytes.
  const std::vector<int> emoji = built.encode("\xf0\x9f\x98\x80", false);
  int bytes = 0;
  for (int id : emoji) bytes += built.is_byte(id);
  EXPECT_EQ(bytes, 4);
}

TEST(SpmModel, BadTokenizerFilesAreErrorsNamingTheFile) {
  const std::string dir = make_temp_dir();
  const std::string truncated = dir + "/truncated.bin";
  {
    std::ifstream in(kTok512Bin, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  for (const auto& [path, vocab, expected] : {std::tuple{truncated, 512, std::string("truncated")},
                                              std::tuple{kTok512Bin, 400, std::string("more than")}}) {
    try {
      read_llama2c_tokenizer(path, vocab);
      ADD_FAILURE() << path << " with vocab " << vocab << " was read";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  std::vector<SpmPiece> not_llama = read_llama2c_tokenizer(kTok512Bin, 512);
  std::swap(not_llama[0], not_llama[5]);  // <unk> no longer at id 0
  EXPECT_THROW(spm_bpe_model_proto(not_llama, "swapped"), Error);
}

}  // namespace
}  // namespace gemlite
