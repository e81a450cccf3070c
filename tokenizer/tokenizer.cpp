#include "tokenizer/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>

#include "runtime/error.h"
#include "runtime/io/readable_file.h"
#include "tokenizer/spm_model.h"

namespace gemlite {

Tokenizer Tokenizer::load(const std::string& model_path) {
  require_readable_file(model_path);
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const sentencepiece::util::Status status = processor->Load(model_path);
  if (status.code() == sentencepiece::util::StatusCode::kNotFound) {
    fail(model_path, "no such file");
  }
  // sentencepiece's message is its source position and the failed check
  // ("./src/sentencepiece_processor.cc(1101) [model_proto->ParseFromArray(...)]"): nothing
  // a user can act on, so it is not passed on.
  if (!status.ok()) fail(model_path, "not a sentencepiece model (corrupt or truncated)");
  return Tokenizer(model_path, std::move(processor));
}

Tokenizer::Tokenizer(std::string model_path,
                     std::unique_ptr<sentencepiece::SentencePieceProcessor> processor)
    : model_path_(std::move(model_path)), processor_(std::move(processor)) {
  const std::string proto = processor_->serialized_model_proto();
  for (const auto& [id, text] : spm_user_defined_pieces(proto, model_path_)) markers_.push_back({id, text, false});
  std::stable_sort(markers_.begin(), markers_.end(),
                   [](const Marker& a, const Marker& b) { return a.text.size() > b.text.size(); });
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::encode_text(const std::string& text, std::vector<int>& ids) const {
  std::vector<int> text_ids;
  const sentencepiece::util::Status status = processor_->Encode(text, &text_ids);
  if (!status.ok()) fail(model_path_, std::string("cannot encode text (") + status.message() + ")");
  ids.insert(ids.end(), text_ids.begin(), text_ids.end());
}

std::vector<int> Tokenizer::encode(const std::string& text, bool add_bos) const {
  std::vector<int> ids;
  if (add_bos) ids.push_back(bos_id());
  size_t at = 0;
  while (at < text.size()) {
    // The earliest marker in the rest of the text (the longest one where several start).
    size_t found = std::string::npos;
    const Marker* marker = nullptr;
    for (const Marker& m : markers_) {
      const size_t where = text.find(m.text, at);
      if (where < found) found = where, marker = &m;
    }
    if (!marker) {
      encode_text(text.substr(at), ids);
      break;
    }
    if (found > at) encode_text(text.substr(at, found - at), ids);
    ids.push_back(marker->id);
    at = found + marker->text.size();
    if (marker->rstrip) at = std::min(text.size(), text.find_first_not_of(" \t\r\n", at));
  }
  return ids;
}

bool Tokenizer::is_marker(int id) const {
  return std::any_of(markers_.begin(), markers_.end(), [&](const Marker& m) { return m.id == id; });
}

void Tokenizer::set_rstrip(const std::vector<int>& marker_ids) {
  for (const int id : marker_ids) {
    const auto marker = std::find_if(markers_.begin(), markers_.end(), [&](const Marker& m) { return m.id == id; });
    if (marker == markers_.end()) fail(model_path_, "token " + std::to_string(id) + " is not a marker to strip after");
    marker->rstrip = true;
  }
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::vector<int> text_ids;  // markers have no text
  for (const int id : ids)
    if (!is_control(id)) text_ids.push_back(id);
  std::string text;
  const sentencepiece::util::Status status = processor_->Decode(text_ids, &text);
  if (!status.ok()) fail(model_path_, std::string("cannot decode ids (") + status.message() + ")");
  return text;
}

int Tokenizer::bos_id() const { return processor_->bos_id(); }
int Tokenizer::eos_id() const { return processor_->eos_id(); }
int Tokenizer::vocab_size() const { return processor_->GetPieceSize(); }

int Tokenizer::piece_to_id(const std::string& piece) const {
  // sentencepiece answers unk_id for unknown pieces; only "<unk>" itself really is unk.
  const int id = processor_->PieceToId(piece);
  return processor_->IsUnknown(id) && processor_->IdToPiece(id) != piece ? -1 : id;
}

const std::string& Tokenizer::piece(int id) const {
  check_id(id);
  return processor_->IdToPiece(id);
}

bool Tokenizer::is_control(int id) const {
  check_id(id);
  return processor_->IsControl(id) ||
         std::any_of(markers_.begin(), markers_.end(), [&](const Marker& m) { return m.id == id; });
}

bool Tokenizer::is_byte(int id) const {
  check_id(id);
  return processor_->IsByte(id);
}

// sentencepiece indexes its vocabulary without a bounds check, so a stray id from a
// model with a larger output layer would read out of bounds.
void Tokenizer::check_id(int id) const {
  if (id < 0 || id >= vocab_size()) {
    fail(model_path_, "token id " + std::to_string(id) + " is outside the vocabulary of " +
                          std::to_string(vocab_size()));
  }
}

}  // namespace gemlite
