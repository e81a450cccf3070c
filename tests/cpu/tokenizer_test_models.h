#pragma once
// The real tokenizers the tokenizer tests run on, from the shared folder next to the
// project. A missing file makes the tests that need it fail (load throws), never skip.
#include <string>

#include "tests/cpu/test_files.h"
#include "tokenizer/tokenizer.h"

namespace gemlite {

// The 512-piece tokenizer of llama2.c's stories260K.
inline const Tokenizer& stories_tokenizer() {
  static const Tokenizer tokenizer =
      Tokenizer::load(shared_file("models/stories260K/tok512.model"));
  return tokenizer;
}

// Llama 2's 32000-piece tokenizer, with byte fallback for rare characters.
inline const Tokenizer& llama2_tokenizer() {
  static const Tokenizer tokenizer =
      Tokenizer::load(shared_file("models/llama2-tokenizer/tokenizer.model"));
  return tokenizer;
}

}  // namespace gemlite
