// The GGUF importer on a real file: stories260K.gguf holds the same fp32 weights as
// stories260K.bin, so every tensor must come out bitwise equal to the llama2.c importer's
// (both convert Meta's interleaved q/k rows to rotate-half), and gemlite-quantize of the
// GGUF alone (tokenizer from its vocabulary) must tell the reference story. Damaged copies of the file (truncated, another
// version, an IQ tensor, a K-quant tensor of rows shorter than its blocks, an unknown
// architecture) are errors naming the file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "models/import_gguf.h"
#include "models/import_llama2c.h"
#include "tokenizer/spm_model.h"
#include "runtime/error.h"
#include "tests/cpu/io_test_helpers.h"
#include "tests/cpu/program_runner.h"
#include "tests/cpu/source_model_checks.h"
#include "tests/cpu/test_files.h"

namespace gemlite {
namespace {

namespace fs = std::filesystem;

const std::string kGguf = shared_file("models/stories260K/stories260K.gguf");
const std::string kBin = shared_file("models/stories260K/stories260K.bin");

// The sniffers that pick an importer look only into regular files: opening a FIFO waits
// for a writer, and gemlite-quantize given one as SOURCE hung there.
TEST(ImportGguf, AFifoIsNeitherGgufNorLlama2cTokenizerAndIsNotWaitedOn) {
  ScratchDir dir;
  const std::string fifo = dir.file("pipe.gguf");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(is_gguf_file(fifo));
  EXPECT_FALSE(is_llama2c_tokenizer(fifo));
  EXPECT_TRUE(is_gguf_file(kGguf));
}

TEST(ImportGguf, Stories260KEqualsItsLlama2cCheckpoint) {
  ASSERT_TRUE(is_gguf_file(kGguf));
  ASSERT_FALSE(is_gguf_file(kBin));
  const SourceModel gguf = load_gguf(kGguf), bin = load_llama2c(kBin);
  const ModelConfig &g = gguf.config, &b = bin.config;
  // The same model, but for what the GGUF states of itself: its context_length (2048; it
  // was trained at 512) and the classifier the converter wrote out as its own tensor.
  ModelConfig expected = b;
  expected.max_seq_len = 2048;
  expected.tied_embeddings = false;
  expect_same_config(g, expected);
  EXPECT_EQ(g.architecture, "llama");
  EXPECT_FLOAT_EQ(g.norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(g.rope_theta, 10000.0f);
  EXPECT_EQ(g.bos_id, 1);
  EXPECT_EQ(g.eos_id, 2);
  EXPECT_FALSE(g.qkv_bias);
  for (const auto& [name, tensor] : bin.tensors) {
    SCOPED_TRACE(name);
    const auto found = gguf.tensors.find(name);
    ASSERT_NE(found, gguf.tensors.end());
    EXPECT_EQ(found->second.dtype, DType::F32);
    EXPECT_EQ(found->second.shape, tensor.shape);
    EXPECT_EQ(std::memcmp(found->second.data, tensor.data, tensor.nbytes()), 0);
  }
  // The converter wrote the shared classifier out as its own tensor.
  EXPECT_FALSE(g.tied_embeddings);
  const HostTensor& lm_head = gguf.tensors.at("lm_head.weight");
  const HostTensor& embedding = bin.tensors.at("model.embed_tokens.weight");
  ASSERT_EQ(lm_head.shape, embedding.shape);
  EXPECT_EQ(std::memcmp(lm_head.data, embedding.data, embedding.nbytes()), 0);
}

// No --tokenizer: the checkpoint's tokenizer.model is built from the GGUF's vocabulary.
TEST(ImportGguf, QuantizedFromGgufTellsTheReferenceStory) {
  const std::string out = make_temp_dir() + "/from-gguf";
  const ProgramRun quantize = run_program_for_test("gemlite-quantize", kGguf + " " + out + " f32", true);
  ASSERT_EQ(quantize.exit_code, 0) << quantize.output;
  EXPECT_NE(quantize.output.find("tokenizer: built from the vocabulary"), std::string::npos) << quantize.output;
  // Readable like the checkpoint's other files (the built model starts as a 0600 temporary).
  EXPECT_EQ(fs::status(out + "/tokenizer.model").permissions(), fs::status(out + "/config.json").permissions());
  const ProgramRun chat =
      run_program_for_test("gemlite-chat", "--device cpu -m " + out + " -p \"Once upon a time\" --temp 0 -n 24", false);
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  EXPECT_NE(chat.output.find("Once upon a time, there was a little girl named Lily. She loved to play outside"),
            std::string::npos)
      << chat.output;
}

// A copy of the real file with `bytes` written at `offset` (or cut to `size`).
std::string damaged_copy(const std::string& name, size_t offset, const std::string& bytes, size_t size = 0) {
  const std::string path = make_temp_dir() + "/" + name;
  fs::copy_file(kGguf, path);
  if (size) fs::resize_file(path, size);
  if (!bytes.empty()) {
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    file.seekp(std::streamoff(offset));
    file.write(bytes.data(), std::streamsize(bytes.size()));
  }
  return path;
}

// Where `text` first appears in the real file.
size_t offset_of(const std::string& text) {
  const std::string bytes = read_bytes(kGguf);
  const size_t at = bytes.find(text);
  EXPECT_NE(at, std::string::npos) << text;
  return at;
}

void expect_error(const std::string& path, const std::string& expected) {
  try {
    load_gguf(path);
    ADD_FAILURE() << path << " loaded; expected an error with '" << expected << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

// An eos id other than </s> (Phi-3 GGUFs say 32000) keeps the vocabulary usable: the
// config carries it (gemlite-chat stops there too); a bos other than <s> does not.
TEST(ImportGguf, VocabularyWithAnotherEosIsStillRead) {
  const size_t eos_at = offset_of("tokenizer.ggml.eos_token_id") + std::strlen("tokenizer.ggml.eos_token_id") + 4;
  const char three[4] = {3, 0, 0, 0};
  const SourceModel other_eos = load_gguf(damaged_copy("eos3.gguf", eos_at, std::string(three, 4)));
  EXPECT_EQ(other_eos.config.eos_id, 3);
  EXPECT_FALSE(other_eos.vocabulary.empty()) << other_eos.vocabulary_problem;
  const size_t bos_at = offset_of("tokenizer.ggml.bos_token_id") + std::strlen("tokenizer.ggml.bos_token_id") + 4;
  const SourceModel other_bos = load_gguf(damaged_copy("bos3.gguf", bos_at, std::string(three, 4)));
  EXPECT_TRUE(other_bos.vocabulary.empty());
  EXPECT_NE(other_bos.vocabulary_problem.find("bos id 3"), std::string::npos) << other_bos.vocabulary_problem;
}

TEST(ImportGguf, DamagedFilesAreErrorsNamingTheFile) {
  const size_t size = fs::file_size(kGguf);
  expect_error(damaged_copy("cut-in-metadata.gguf", 0, "", 200), "truncated");
  expect_error(damaged_copy("cut-in-data.gguf", 0, "", size - 1000), "truncated");
  const char version[4] = {9, 0, 0, 0};
  expect_error(damaged_copy("version.gguf", 4, std::string(version, 4)), "GGUF version 9");
  // token_embd.weight's type field: after its name, rank (4 bytes) and two extents (16).
  const size_t type_at = offset_of("token_embd.weight") + std::strlen("token_embd.weight") + 4 + 16;
  const char iq2_xs[4] = {17, 0, 0, 0};
  expect_error(damaged_copy("codebook.gguf", type_at, std::string(iq2_xs, 4)), "IQ2_XS");
  // A K-quant needs rows of whole 256-weight super-blocks; token_embd's rows are 64 wide.
  const char q4_k[4] = {12, 0, 0, 0};
  expect_error(damaged_copy("quantized.gguf", type_at, std::string(q4_k, 4)), "not in whole Q4_K blocks");
  // general.architecture's value: after the key, its type (4 bytes) and length (8).
  const size_t arch_at = offset_of("general.architecture") + std::strlen("general.architecture") + 4 + 8;
  expect_error(damaged_copy("arch.gguf", arch_at, "falco"), "architecture 'falco'");
  // token_embd.weight's first extent made 2^32: its bytes would overflow a size long before
  // they reached the file's end.
  const size_t extent_at = offset_of("token_embd.weight") + std::strlen("token_embd.weight") + 4;
  const char huge[8] = {0, 0, 0, 0, 1, 0, 0, 0};
  expect_error(damaged_copy("huge.gguf", extent_at, std::string(huge, 8)), "larger than the file");
  // llama.embedding_length's value (after the key and its type, 4 bytes) made 0: named as
  // such, where a partial rope had been reported.
  const size_t width_at = offset_of("llama.embedding_length") + std::strlen("llama.embedding_length") + 4;
  expect_error(damaged_copy("width.gguf", width_at, std::string(4, '\0')), "llama.embedding_length 0");
}

// A tensor's info in the header: name, rank (4 bytes), extents (8 each), type (4), then
// its offset (8) into the data section. Where the offset of the 2-D `name` lies.
size_t offset_field_of(const std::string& name, int rank) {
  return offset_of(name) + name.size() + 4 + 8 * size_t(rank) + 4;
}

// GGUF offsets must be multiples of general.alignment (32 here) and tensors must not share
// bytes: an overlap had converted with exit 0, an unaligned offset failed with a misleading
// NaN. Each is one line naming the file and the tensor.
TEST(ImportGguf, UnalignedOrOverlappingTensorOffsetsAreRefused) {
  const std::string bytes = read_bytes(kGguf);
  const size_t embd_at = offset_field_of("token_embd.weight", 2), norm_at = offset_field_of("blk.0.attn_norm.weight", 1);
  uint64_t embd_offset = 0, norm_offset = 0;
  std::memcpy(&embd_offset, bytes.data() + embd_at, 8);
  std::memcpy(&norm_offset, bytes.data() + norm_at, 8);
  ASSERT_EQ(embd_offset % 32, 0u);
  ASSERT_NE(embd_offset, norm_offset);

  uint64_t shifted = embd_offset + 4;
  expect_error(damaged_copy("unaligned.gguf", embd_at, std::string(reinterpret_cast<const char*>(&shifted), 8)),
               "tensor 'token_embd.weight' is at offset " + std::to_string(shifted) +
                   ", not a multiple of general.alignment 32");
  // blk.0.attn_norm [64] F32 moved onto the embedding's first 256 bytes: aligned, in the
  // file, and each tensor's size is right; only the overlap is wrong.
  expect_error(damaged_copy("overlap.gguf", norm_at, std::string(reinterpret_cast<const char*>(&embd_offset), 8)),
               "overlap in the data section");
  expect_error(damaged_copy("overlap2.gguf", norm_at, std::string(reinterpret_cast<const char*>(&embd_offset), 8)),
               "'blk.0.attn_norm.weight'");
  EXPECT_NO_THROW(load_gguf(kGguf));
}

// llama.block_count 4 beside five blocks of tensors: blk.4 had been dropped silently.
TEST(ImportGguf, BlocksBeyondTheBlockCountAreRefused) {
  const size_t count_at = offset_of("llama.block_count") + std::strlen("llama.block_count") + 4;
  const char four[4] = {4, 0, 0, 0};
  expect_error(damaged_copy("blocks4.gguf", count_at, std::string(four, 4)),
               "tensor 'model.layers.4.input_layernorm.weight' is not used by a 4-layer model");
  EXPECT_EQ(load_gguf(kGguf).config.n_layers, 5);  // the undamaged file: five blocks, all used
}

}  // namespace
}  // namespace gemlite
