#pragma once
// UTF-8 well-formedness, for streaming text that arrives a byte at a time: byte-fallback
// tokens carry single bytes of a character, and a terminal must never get half of one.
#include <string>
#include <string_view>

namespace gemlite {

// Moves the longest prefix of `bytes` that can be printed now out of `bytes` and returns
// it as valid UTF-8. Each malformed byte becomes U+FFFD (as sentencepiece's decoder does).
// A trailing sequence that is incomplete but could still become valid stays in `bytes`
// for the next call, unless `at_end` says no more bytes will come.
std::string take_printable_utf8(std::string& bytes, bool at_end);

bool is_valid_utf8(std::string_view text);

}  // namespace gemlite
