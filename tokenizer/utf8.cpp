#include "tokenizer/utf8.h"

namespace gemlite {
namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

enum class SequenceState { Complete, Incomplete, Malformed };

struct Sequence {
  SequenceState state;
  size_t length;  // bytes of a Complete sequence
};

// Looks at the sequence starting at text[0]. The byte ranges are Unicode's table of
// well-formed UTF-8 (The Unicode Standard, table 3-7): restricting the second byte
// rejects overlong forms, UTF-16 surrogates and code points above U+10FFFF.
Sequence first_sequence(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return {SequenceState::Complete, 1};

  size_t length = 0;
  unsigned char second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;
    if (lead == 0xED) second_max = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;
    if (lead == 0xF4) second_max = 0x8F;
  } else {
    return {SequenceState::Malformed, 0};
  }

  for (size_t i = 1; i < length; ++i) {
    if (i == text.size()) return {SequenceState::Incomplete, 0};
    const unsigned char min = i == 1 ? second_min : 0x80;
    const unsigned char max = i == 1 ? second_max : 0xBF;
    if (byte(i) < min || byte(i) > max) return {SequenceState::Malformed, 0};
  }
  return {SequenceState::Complete, length};
}

}  // namespace

std::string take_printable_utf8(std::string& bytes, bool at_end) {
  std::string printable;
  std::string_view rest = bytes;
  while (!rest.empty()) {
    const Sequence sequence = first_sequence(rest);
    if (sequence.state == SequenceState::Incomplete && !at_end) break;
    if (sequence.state == SequenceState::Complete) {
      printable += rest.substr(0, sequence.length);
      rest.remove_prefix(sequence.length);
    } else {
      printable += kReplacementCharacter;
      rest.remove_prefix(1);
    }
  }
  bytes = std::string(rest);
  return printable;
}

bool is_valid_utf8(std::string_view text) {
  while (!text.empty()) {
    const Sequence sequence = first_sequence(text);
    if (sequence.state != SequenceState::Complete) return false;
    text.remove_prefix(sequence.length);
  }
  return true;
}

}  // namespace gemlite
