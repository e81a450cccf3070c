#pragma once
// Text <-> token ids through a sentencepiece model (the tokenizer.model of Llama 2,
// TinyLlama, Mistral and llama2.c's stories models).
//
// Every encode() call applies the model's add_dummy_prefix on its own, so text encoded
// separately (for example each turn of a chat) starts with a space token ("▁[INST]"), as
// if a space preceded it. llama.cpp tokenizes chat turns the same way; the models cope.
//
// Markers: the model's user-defined pieces (Phi-3's <|user|> .. <|end|>, added from
// tokenizer.json by gemlite-quantize). encode() cuts the text at each marker and encodes
// the pieces of text between them on their own, as llama.cpp does with special tokens:
// each piece of text gets the dummy-prefix space (a marker at the start gets none), and
// whitespace after a marker set with set_rstrip() is dropped (tokenizer.json's "rstrip",
// kept in the packed checkpoint). Markers decode to nothing, like control tokens.
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace gemlite {

class Tokenizer {
 public:
  // Throws Error("<model_path>: ...") when the file is missing or not a sentencepiece model.
  static Tokenizer load(const std::string& model_path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int> encode(const std::string& text, bool add_bos) const;
  // Control tokens (BOS, EOS) decode to nothing; byte-fallback tokens are joined into UTF-8.
  std::string decode(const std::vector<int>& ids) const;

  int bos_id() const;
  int eos_id() const;
  int vocab_size() const;
  // The id of a piece spelled exactly like `piece`, or -1 when the vocabulary lacks it.
  int piece_to_id(const std::string& piece) const;

  // Markers after which encode() drops whitespace; Error for an id that is no marker.
  void set_rstrip(const std::vector<int>& marker_ids);
  bool is_marker(int id) const;  // an added token matched in the text before sentencepiece

  // The vocabulary entry of `id` as stored ("▁the", "<0x0A>", "</s>"), for StreamDecoder.
  const std::string& piece(int id) const;
  bool is_control(int id) const;  // BOS, EOS, markers: tokens that have no text
  bool is_byte(int id) const;     // byte-fallback pieces "<0xNN>"

 private:
  Tokenizer(std::string model_path,
            std::unique_ptr<sentencepiece::SentencePieceProcessor> processor);
  void check_id(int id) const;

  void encode_text(const std::string& text, std::vector<int>& ids) const;  // no markers in `text`

  std::string model_path_;  // names the model in error messages
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  struct Marker {
    int id;
    std::string text;
    bool rstrip;
  };
  std::vector<Marker> markers_;  // longest text first, so a marker that starts another wins
};

}  // namespace gemlite
