#include "tokenizer/stream_decoder.h"

#include <string_view>

#include "tokenizer/utf8.h"

namespace gemlite {
namespace {

constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";  // U+2581 '▁'

std::string replace_sentencepiece_spaces(std::string_view piece) {
  std::string text;
  for (size_t at = 0; at < piece.size();) {
    if (piece.substr(at, kSentencePieceSpace.size()) == kSentencePieceSpace) {
      text += ' ';
      at += kSentencePieceSpace.size();
    } else {
      text += piece[at++];
    }
  }
  return text;
}

// Byte-fallback pieces are spelled "<0xNN>" with two upper-case hex digits.
char byte_of_piece(const std::string& piece) {
  return static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

std::string StreamDecoder::push(int id) {
  const bool follows_bos = after_bos_;
  after_bos_ = id == tokenizer_.bos_id();
  // Ids past the tokenizer's pieces come from a model whose vocabulary is padded beyond them
  // (Phi-3: 32064 rows, 32011 pieces): they have no text, as in llama.cpp.
  if (id >= tokenizer_.vocab_size() || tokenizer_.is_control(id)) return "";

  if (tokenizer_.is_byte(id)) {
    pending_bytes_ += byte_of_piece(tokenizer_.piece(id));
    return take_printable_utf8(pending_bytes_, /*at_end=*/false);
  }

  // A text piece ends any character the byte tokens before it left unfinished.
  std::string text = take_printable_utf8(pending_bytes_, /*at_end=*/true);
  std::string piece = replace_sentencepiece_spaces(tokenizer_.piece(id));
  if (follows_bos && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  return text + piece;
}

std::string StreamDecoder::flush() { return take_printable_utf8(pending_bytes_, /*at_end=*/true); }

}  // namespace gemlite
