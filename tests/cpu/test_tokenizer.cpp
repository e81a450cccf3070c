#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "tests/cpu/tokenizer_test_models.h"

namespace gemlite {
namespace {

const std::string kLilySentence = "Once upon a time, there was a little girl named Lily.";

std::string read_whole_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  EXPECT_TRUE(file) << path;
  std::ostringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

// The error message of `load(path)`, or "" when it did not throw.
std::string load_error(const std::string& path) {
  try {
    Tokenizer::load(path);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(Tokenizer, StoriesEncodesReferenceIds) {
  const Tokenizer& tokenizer = stories_tokenizer();
  EXPECT_EQ(tokenizer.encode(kLilySentence, false),
            (std::vector<int>{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395,
                              317, 426}));
  EXPECT_EQ(tokenizer.encode("Once upon a time", false), (std::vector<int>{403, 407, 261, 378}));
  EXPECT_EQ(tokenizer.encode("Once upon a time", true),
            (std::vector<int>{1, 403, 407, 261, 378}));
}

TEST(Tokenizer, Llama2EncodesReferenceIds) {
  EXPECT_EQ(llama2_tokenizer().encode(kLilySentence, false),
            (std::vector<int>{9038, 2501, 263, 931, 29892, 727, 471, 263, 2217, 7826, 4257, 365,
                              2354, 29889}));
}

// llama.cpp's perplexity tokenizes the whole file at once, with BOS: 655 windows of 512.
TEST(Tokenizer, Llama2EncodesWikitextTestSplitToReferenceCount) {
  const std::string text = read_whole_file(shared_file("data/wikitext-2/wiki.test.raw"));
  EXPECT_EQ(llama2_tokenizer().encode(text, true).size(), 335688u);
}

TEST(Tokenizer, SpecialIdsAndVocabularySize) {
  EXPECT_EQ(stories_tokenizer().bos_id(), 1);
  EXPECT_EQ(stories_tokenizer().eos_id(), 2);
  EXPECT_EQ(stories_tokenizer().vocab_size(), 512);
  EXPECT_EQ(llama2_tokenizer().vocab_size(), 32000);
}

TEST(Tokenizer, DecodeInvertsEncode) {
  const Tokenizer& tokenizer = llama2_tokenizer();
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(kLilySentence, true)), kLilySentence);
}

TEST(Tokenizer, PieceToIdAnswersMinusOneForAbsentPieces) {
  const Tokenizer& tokenizer = llama2_tokenizer();
  EXPECT_EQ(tokenizer.piece_to_id("</s>"), 2);
  EXPECT_EQ(tokenizer.piece_to_id("<unk>"), 0);
  EXPECT_EQ(tokenizer.piece_to_id("<|im_start|>"), -1);
}

TEST(Tokenizer, PieceOfIdOutsideVocabularyThrows) {
  EXPECT_THROW(stories_tokenizer().piece(512), Error);
  EXPECT_THROW(stories_tokenizer().piece(-1), Error);
}

TEST(Tokenizer, MissingModelFileErrorNamesPath) {
  const std::string path = testing::TempDir() + "no_such_tokenizer.model";
  EXPECT_EQ(load_error(path).rfind(path + ": ", 0), 0u) << load_error(path);
}

// Garbage or a model cut short is one plain line: sentencepiece's own status text
// ("./src/sentencepiece_processor.cc(1101) [model_proto->ParseFromArray(...)]") had
// reached the user.
TEST(Tokenizer, GarbageOrTruncatedModelFileErrorNamesPath) {
  const ScratchDir dir;
  const std::string garbage = dir.file("garbage_tokenizer.model");
  std::ofstream(garbage, std::ios::binary) << "this is not a protobuf \xff\xfe\x01 model";
  const std::string truncated = dir.file("truncated_tokenizer.model");
  const std::string whole = read_whole_file(shared_file("models/stories260K/tok512.model"));
  std::ofstream(truncated, std::ios::binary) << whole.substr(0, whole.size() / 2);
  for (const std::string& path : {garbage, truncated})
    EXPECT_EQ(load_error(path), path + ": not a sentencepiece model (corrupt or truncated)");
}

TEST(Tokenizer, IsMovable) {
  Tokenizer moved = Tokenizer::load(shared_file("models/stories260K/tok512.model"));
  Tokenizer tokenizer = std::move(moved);
  EXPECT_EQ(tokenizer.encode("Once upon a time", false), (std::vector<int>{403, 407, 261, 378}));
}

}  // namespace
}  // namespace gemlite
