#include "tokenizer/spm_model.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "runtime/error.h"
#include "runtime/io/readable_file.h"

namespace gemlite {
namespace {

// Protocol-buffer wire format, the little of it a ModelProto needs.
void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(char((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(char(value));
}
void put_tag(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}
void put_int(std::string& out, int field, int64_t value) {
  put_tag(out, field, 0);
  put_varint(out, uint64_t(value));
}
void put_float(std::string& out, int field, float value) {
  put_tag(out, field, 5);
  char bytes[4];
  std::memcpy(bytes, &value, 4);
  out.append(bytes, 4);
}

// Field numbers of sentencepiece_model.proto.
enum ModelProtoField { kPieces = 1, kTrainerSpec = 2, kNormalizerSpec = 3 };
enum PieceField { kPieceText = 1, kPieceScore = 2, kPieceType = 3 };
enum TrainerSpecField { kModelType = 3, kVocabSize = 4, kByteFallback = 35 };
enum NormalizerSpecField { kName = 1, kAddDummyPrefix = 3, kRemoveExtraWhitespaces = 4, kEscapeWhitespaces = 5 };
constexpr int kModelTypeBpe = 2;

const std::string kSpace = "\xe2\x96\x81";  // "▁"

// One entry of ModelProto's repeated `pieces`. Protocol buffers concatenate the entries of
// a repeated field wherever they stand in a message, so entries written after a whole
// serialized model extend its vocabulary.
void put_piece(std::string& model, const SpmPiece& piece) {
  std::string entry;
  put_bytes(entry, kPieceText, piece.text);
  put_float(entry, kPieceScore, piece.score);
  if (piece.type != SpmPieceType::Normal) put_int(entry, kPieceType, int(piece.type));
  put_bytes(model, kPieces, entry);
}

}  // namespace

std::string spm_model_with_added_tokens(const std::string& model_proto, const Tokenizer& base, int vocab_limit,
                                        const std::vector<std::pair<int, std::string>>& added,
                                        const std::string& where) {
  const int model_pieces = base.vocab_size();
  std::map<int, std::string> by_id;
  std::set<std::string> texts;
  for (const auto& [id, text] : added) {
    std::string shown;  // the text as an error can print it (a NUL cut the message short)
    for (const char c : text) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02X", unsigned(uint8_t(c)));
      shown += uint8_t(c) < 0x20 ? std::string(escaped) : std::string(1, c);
    }
    const std::string token = "added token " + std::to_string(id) + " '" + shown + "'";
    if (id < model_pieces) {  // tokenizer.json re-declaring the model's own <unk>, <s>, </s>
      if (base.piece(id) != text)
        fail(where, token + " disagrees with the tokenizer.model's piece '" + base.piece(id) + "'");
      continue;
    }
    if (id >= vocab_limit) continue;  // the model cannot produce it (a <pad> past the rows): not a marker
    if (text.empty() || text.find('\0') != std::string::npos) fail(where, token + " is empty or holds a NUL");
    if (text.rfind("<gemlite_unused_", 0) == 0) fail(where, token + " takes the name of a filler piece");
    if (base.piece_to_id(text) >= 0)
      fail(where, token + " is already the tokenizer.model's piece " + std::to_string(base.piece_to_id(text)));
    if (!texts.insert(text).second) fail(where, token + ": that text is added twice");
    if (!by_id.emplace(id, text).second) fail(where, "added token id " + std::to_string(id) + " appears twice");
  }
  std::string model = model_proto;
  int next = model_pieces;
  for (const auto& [id, text] : by_id) {
    for (; next < id; ++next) put_piece(model, {"<gemlite_unused_" + std::to_string(next) + ">", 0, SpmPieceType::Unused});
    put_piece(model, {text, 0, SpmPieceType::UserDefined});
    ++next;
  }
  return model;
}

namespace {

// Reads a protocol-buffer varint at `at`; false when the bytes end first.
bool get_varint(const std::string& bytes, size_t& at, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && at < bytes.size(); shift += 7) {
    const uint8_t byte = uint8_t(bytes[at++]);
    value |= uint64_t(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

// Calls on_field(field, wire_type, payload) for each field of a message; payload is the
// bytes of a length-delimited field, empty otherwise (varints go to `varint`).
template <class F>
void for_each_field(const std::string& message, const std::string& where, F&& on_field) {
  size_t at = 0;
  while (at < message.size()) {
    uint64_t tag = 0, value = 0;
    if (!get_varint(message, at, tag)) fail(where, "not a sentencepiece model (truncated protocol buffer)");
    const int field = int(tag >> 3), wire = int(tag & 7);
    if (wire == 0) {
      if (!get_varint(message, at, value)) fail(where, "not a sentencepiece model (truncated varint)");
      on_field(field, wire, std::string(), value);
    } else if (wire == 2) {
      if (!get_varint(message, at, value) || value > message.size() - at)
        fail(where, "not a sentencepiece model (a field runs past the end)");
      on_field(field, wire, message.substr(at, size_t(value)), 0);
      at += size_t(value);
    } else if (wire == 1 || wire == 5) {
      const size_t size = wire == 1 ? 8 : 4;
      if (size > message.size() - at) fail(where, "not a sentencepiece model (truncated fixed field)");
      at += size;
    } else {
      fail(where, "not a sentencepiece model (wire type " + std::to_string(wire) + ")");
    }
  }
}

}  // namespace

std::vector<std::pair<int, std::string>> spm_user_defined_pieces(const std::string& model_proto,
                                                                 const std::string& where) {
  std::vector<std::pair<int, std::string>> found;
  int id = 0;
  for_each_field(model_proto, where, [&](int field, int wire, const std::string& payload, uint64_t) {
    if (field != kPieces || wire != 2) return;
    std::string text;
    uint64_t type = uint64_t(SpmPieceType::Normal);
    for_each_field(payload, where, [&](int piece_field, int, const std::string& bytes, uint64_t varint) {
      if (piece_field == kPieceText) text = bytes;
      if (piece_field == kPieceType) type = varint;
    });
    if (type == uint64_t(SpmPieceType::UserDefined)) found.emplace_back(id, text);
    ++id;
  });
  return found;
}

std::string spm_bpe_model_proto(const std::vector<SpmPiece>& pieces, const std::string& where) {
  if (pieces.size() < 3 || pieces[0].type != SpmPieceType::Unknown || pieces[1].type != SpmPieceType::Control ||
      pieces[2].type != SpmPieceType::Control)
    fail(where, "vocabulary does not start with <unk>, <s>, </s> (ids 0, 1, 2); not a llama-style vocabulary");
  std::string model;
  bool has_bytes = false;
  for (const SpmPiece& piece : pieces) {
    if (piece.text.empty()) fail(where, "vocabulary holds an empty piece");
    put_piece(model, piece);
    has_bytes |= piece.type == SpmPieceType::Byte;
  }
  std::string trainer;
  put_int(trainer, kModelType, kModelTypeBpe);
  put_int(trainer, kVocabSize, int64_t(pieces.size()));
  put_int(trainer, kByteFallback, has_bytes);
  put_bytes(model, kTrainerSpec, trainer);
  std::string normalizer;
  put_bytes(normalizer, kName, "identity");
  put_int(normalizer, kAddDummyPrefix, 1);
  put_int(normalizer, kRemoveExtraWhitespaces, 0);
  put_int(normalizer, kEscapeWhitespaces, 1);
  put_bytes(model, kNormalizerSpec, normalizer);
  return model;
}

std::vector<SpmPiece> read_llama2c_tokenizer(const std::string& path, int vocab_size) {
  require_readable_file(path);  // an unreadable file is not a missing one
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 4;  // max_token_length, unused
  const auto read_i32 = [&](const char* what) {
    if (bytes.size() - std::min(at, bytes.size()) < 4)
      fail(path, std::string("truncated (reading ") + what + " at byte " + std::to_string(at) + ")");
    int32_t value;
    std::memcpy(&value, bytes.data() + at, 4);
    at += 4;
    return value;
  };
  std::vector<SpmPiece> pieces;
  for (int id = 0; id < vocab_size; ++id) {
    SpmPiece piece;
    const int32_t score_bits = read_i32("a score");
    std::memcpy(&piece.score, &score_bits, 4);
    const int32_t length = read_i32("a length");
    if (length < 1 || size_t(length) > bytes.size() - at)
      fail(path, "truncated or corrupt at token " + std::to_string(id) + " (length " + std::to_string(length) + ")");
    std::string text = bytes.substr(at, size_t(length));
    at += size_t(length);
    if (id == 0) {
      piece.type = SpmPieceType::Unknown;
    } else if (id == 1 || id == 2) {  // written as "\n<s>\n" / "\n</s>\n"
      piece.type = SpmPieceType::Control;
      text = id == 1 ? "<s>" : "</s>";
    } else if (text.size() == 6 && text.rfind("<0x", 0) == 0 && text.back() == '>') {
      piece.type = SpmPieceType::Byte;
    } else {
      for (size_t i = 0; (i = text.find(' ', i)) != std::string::npos; i += kSpace.size()) text.replace(i, 1, kSpace);
    }
    piece.text = text;
    pieces.push_back(std::move(piece));
  }
  if (at != bytes.size())
    fail(path, "holds more than the model's " + std::to_string(vocab_size) + " tokens (another model's tokenizer?)");
  return pieces;
}

bool is_llama2c_tokenizer(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return false;  // a FIFO would block the open
  std::ifstream in(path, std::ios::binary);
  unsigned char head[3] = {};
  in.read(reinterpret_cast<char*>(head), 3);
  // A ModelProto opens with its first piece: tag 0x0A, the piece's length, then the piece's
  // own text tag 0x0A. A tokenizer.bin opens with max_token_length as an int32, whose first
  // byte may be 0x0A too (10), but whose second byte is then 0.
  const bool proto = in && head[0] == 0x0A && head[1] != 0 && head[2] == 0x0A;
  return in && !proto;
}

}  // namespace gemlite
