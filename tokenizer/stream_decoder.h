#pragma once
// Turns generated token ids into printable text one id at a time. A character may span
// several byte-fallback tokens ("🙂" is <0xF0><0x9F><0x99><0x82>), so bytes are held back
// until they form a whole UTF-8 character; the output is always valid UTF-8.
#include <string>

#include "tokenizer/tokenizer.h"

namespace gemlite {

class StreamDecoder {
 public:
  // Keeps a reference: `tokenizer` must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer);

  // The text that `id` completes. Control tokens (BOS, EOS) print nothing; <unk> prints
  // its piece, as in llama2.c. The piece right after a BOS loses its leading space, as in
  // llama2.c and sentencepiece's decode: that space is the encoder's dummy prefix, not
  // part of the text. Push only the generated ids (no BOS) to continue a prompt that is
  // already on screen, so the continuation keeps its spaces.
  std::string push(int id);

  // Whatever is still held back, with bytes that never formed a character as U+FFFD.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_bytes_;  // the start of a character split over byte tokens
  bool after_bos_ = false;
};

}  // namespace gemlite
