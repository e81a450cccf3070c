#pragma once
// A sentencepiece BPE model built from a vocabulary that came without one: the pieces and
// scores a GGUF file (tokenizer.ggml.*, model "llama") or a llama2.c tokenizer.bin carries.
// The result is the serialized ModelProto that sentencepiece loads, so the rest of the
// project keeps one tokenizer (tokenizer.h) and a packed checkpoint always holds a
// tokenizer.model.
//
// Normalization is llama.cpp's for such vocabularies: a dummy-prefix space, spaces
// written as "▁", whitespace runs kept (llama.cpp does not collapse them; sentencepiece's
// trainer default would), byte fallback when the vocabulary has "<0xNN>" pieces; unk, bos
// and eos are ids 0, 1 and 2 (anything else is an Error).
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace gemlite {

enum class SpmPieceType { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct SpmPiece {
  std::string text;  // as sentencepiece stores it: "▁the", "<0x0A>", "<s>"
  float score = 0;
  SpmPieceType type = SpmPieceType::Normal;
};

// The serialized sentencepiece ModelProto of a BPE model over `pieces` (id = index).
// `where` names the source in errors.
std::string spm_bpe_model_proto(const std::vector<SpmPiece>& pieces, const std::string& where);

// A sentencepiece model (`model_proto`, the bytes of the tokenizer.model that `base` was
// loaded from) extended by tokens a Hugging Face tokenizer adds beside it (tokenizer.json's
// "added_tokens", e.g. Phi-3's <|user|> ... <|end|> at ids 32000..): each becomes a
// user-defined piece at its id, which sentencepiece matches whole wherever it appears in
// text; ids between them that no token names become unused pieces ("<gemlite_unused_N>",
// score 0). Tokenizer::encode() cuts text at these pieces (see tokenizer.h: markers).
// Ids at or past `vocab_limit` (the model's rows) are skipped. Errors name `where`: an id
// named twice, or below base's size with a text other than base's piece there; a text that
// is empty, holds a NUL, is already a piece of `base`, takes a filler's name, or is added twice.
std::string spm_model_with_added_tokens(const std::string& model_proto, const Tokenizer& base, int vocab_limit,
                                        const std::vector<std::pair<int, std::string>>& added,
                                        const std::string& where);

// The user-defined pieces {id, text} of a serialized ModelProto (what
// spm_model_with_added_tokens adds; sentencepiece's API does not tell them from normal
// pieces). `where` names the model in errors for a malformed proto.
std::vector<std::pair<int, std::string>> spm_user_defined_pieces(const std::string& model_proto,
                                                                 const std::string& where);

// A llama2.c tokenizer.bin (int32 max_token_length, then per token: float score, int32
// length, bytes; "▁" written as a space, BOS/EOS as "\n<s>\n" / "\n</s>\n") as pieces.
// Throws Error naming `path` when it is truncated or does not hold `vocab_size` tokens.
std::vector<SpmPiece> read_llama2c_tokenizer(const std::string& path, int vocab_size);

// Whether `path` looks like a llama2.c tokenizer.bin rather than a sentencepiece model
// (whose serialized proto starts with a piece entry: bytes 0x0A, its length, 0x0A).
bool is_llama2c_tokenizer(const std::string& path);

}  // namespace gemlite
