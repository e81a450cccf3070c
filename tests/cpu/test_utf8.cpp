#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace gemlite {
namespace {

const std::string kReplacementCharacter = "\xEF\xBF\xBD";

TEST(Utf8, ValidatesWellFormedText) {
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("na\xC3\xAFve \xE6\x97\xA5 \xF0\x9F\x99\x82"));  // ï 日 🙂
  EXPECT_FALSE(is_valid_utf8("\xF0\x9F\x99"));      // cut short
  EXPECT_FALSE(is_valid_utf8("\x80"));              // stray continuation byte
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // UTF-16 surrogate D800
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
}

TEST(Utf8, HoldsBackAnIncompleteCharacterUntilItCompletes) {
  std::string bytes = "a\xF0\x9F";
  EXPECT_EQ(take_printable_utf8(bytes, /*at_end=*/false), "a");
  EXPECT_EQ(bytes, "\xF0\x9F");
  bytes += "\x99\x82";
  EXPECT_EQ(take_printable_utf8(bytes, /*at_end=*/false), "\xF0\x9F\x99\x82");
  EXPECT_EQ(bytes, "");
}

TEST(Utf8, ReplacesEachMalformedByte) {
  std::string bytes = "\xF0\x9F" "a";
  EXPECT_EQ(take_printable_utf8(bytes, /*at_end=*/false),
            kReplacementCharacter + kReplacementCharacter + "a");
  bytes = "\xE6\x97";
  EXPECT_EQ(take_printable_utf8(bytes, /*at_end=*/true),
            kReplacementCharacter + kReplacementCharacter);
  EXPECT_EQ(bytes, "");
}

}  // namespace
}  // namespace gemlite
