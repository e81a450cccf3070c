#include <gtest/gtest.h>
#include <sys/stat.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "runtime/interrupt.h"
#include "runtime/io/safetensors.h"
#include "tests/cpu/io_test_helpers.h"

namespace gemlite {
namespace {

namespace fs = std::filesystem;

std::string le64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = char(value >> (8 * i));
  return bytes;
}

// A file with this header text and `data_bytes` zero bytes of data, built by hand so the
// reader can be fed exactly the malformation under test.
std::string raw_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

// A tensor whose every byte differs from its neighbours', so misplaced bytes show.
HostTensor patterned(DType dtype, std::vector<int64_t> shape, uint8_t seed) {
  HostTensor t = HostTensor::zeros(dtype, std::move(shape));
  for (size_t i = 0; i < t.nbytes(); ++i) t.mutable_as<uint8_t>()[i] = uint8_t(seed + 7 * i);
  return t;
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  ScratchDir dir;
  const std::string path = dir.file("all.safetensors");
  const std::map<std::string, HostTensor> tensors = {
      {"f32", patterned(DType::F32, {2, 3}, 1)},     {"f16", patterned(DType::F16, {4}, 2)},
      {"bf16", patterned(DType::BF16, {3, 1, 2}, 3)}, {"i32", patterned(DType::I32, {5}, 4)},
      {"i8", patterned(DType::I8, {7}, 5)},          {"u8_scalar", patterned(DType::U8, {}, 6)},
      {"empty", patterned(DType::F32, {0, 4}, 7)}};
  SafetensorsWriter writer;
  for (const auto& [name, t] : tensors) writer.add(name, t);
  writer.set_metadata("format", "pt");
  writer.set_metadata("note", "round trip");
  writer.write(path);

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"bf16", "empty", "f16", "f32", "i32", "i8", "u8_scalar"}));
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "round trip"}}));
  size_t data_bytes = 0;
  for (const auto& [name, written] : tensors) {
    SCOPED_TRACE(name);
    const HostTensor& read = file.get(name);
    EXPECT_EQ(read.dtype, written.dtype);
    EXPECT_EQ(read.shape, written.shape);
    ASSERT_EQ(read.nbytes(), written.nbytes());
    EXPECT_EQ(std::memcmp(read.data, written.data, read.nbytes()), 0);
    data_bytes += written.nbytes();
  }

  // Header padded to a multiple of 8 with spaces; data contiguous with no gaps.
  const std::string bytes = read_bytes(path);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  EXPECT_NE(bytes[8 + header_size - 1], '\0');
  EXPECT_EQ(bytes.size(), 8 + header_size + data_bytes);
  EXPECT_TRUE(leftovers_beside(path).empty());
}

TEST(Safetensors, TensorsKeepTheMappingAliveAfterTheFileIsGone) {
  ScratchDir dir;
  const std::string path = dir.file("one.safetensors");
  const HostTensor written = patterned(DType::F32, {16}, 9);
  SafetensorsWriter writer;
  writer.add("w", written);
  writer.write(path);

  HostTensor kept;
  { kept = SafetensorsFile::open(path).get("w"); }
  fs::remove(path);  // the mapping outlives the name too
  EXPECT_EQ(std::memcmp(kept.data, written.data, written.nbytes()), 0);
}

TEST(Safetensors, AcceptsGapsBetweenTensors) {
  ScratchDir dir;
  const std::string path = dir.file("gaps.safetensors");
  std::string bytes = raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})", 12);
  const size_t data = bytes.size() - 12;  // the data section: a at 0..4, a gap, b at 8..10
  for (size_t i = 0; i < 12; ++i) bytes[data + i] = char(0x10 + i);
  write_bytes(path, bytes);
  const SafetensorsFile file = SafetensorsFile::open(path);
  const HostTensor b = file.get("b");
  EXPECT_EQ(b.shape, std::vector<int64_t>{2});
  ASSERT_EQ(b.nbytes(), 2u);
  EXPECT_EQ(b.as<uint8_t>()[0], 0x18);  // data bytes 8 and 9, past the gap
  EXPECT_EQ(b.as<uint8_t>()[1], 0x19);
}

TEST(Safetensors, CopiesMisalignedTensorsIntoAlignedMemory) {
  ScratchDir dir;
  const std::string path = dir.file("misaligned.safetensors");
  // A 109-byte header (one trailing space) puts the data section at byte 117 of the
  // page-aligned mapping, so both tensors start misaligned for their 4-byte elements.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"I32","shape":[1],"data_offsets":[9,13]}} )";
  std::string data(13, '\0');
  const float a[2] = {1.5f, -2.25f};
  const int32_t b = 123456789;
  std::memcpy(&data[0], a, sizeof(a));
  std::memcpy(&data[9], &b, sizeof(b));
  ASSERT_EQ(header.size(), 109u);
  write_bytes(path, le64(header.size()) + header + data);
  const SafetensorsFile file = SafetensorsFile::open(path);
  const HostTensor& ta = file.get("a");
  const HostTensor& tb = file.get("b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ta.data) % 4, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tb.data) % 4, 0u);
  EXPECT_EQ(ta.as<float>()[0], 1.5f);
  EXPECT_EQ(ta.as<float>()[1], -2.25f);
  EXPECT_EQ(tb.as<int32_t>()[0], b);
}

TEST(Safetensors, NamesTheMissingTensor) {
  ScratchDir dir;
  const std::string path = dir.file("empty.safetensors");
  write_bytes(path, raw_file("{}", 0));
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_FALSE(file.has("w"));
  expect_error_mentions([&] { file.get("w"); }, {path, "no tensor 'w'"});
}

struct MalformedCase {
  const char* label;
  std::string bytes;
  const char* expected_words;
};

TEST(Safetensors, RejectsMalformedFilesNamingThePathAndProblem) {
  const std::string f32_entry = R"("dtype":"F32","shape":[1],"data_offsets":[0,4])";
  auto one_entry = [](const std::string& fields) { return raw_file("{\"a\":{" + fields + "}}", 4); };
  const std::vector<MalformedCase> cases = {
      {"shorter than the length field", "abc", "shorter than 8 bytes"},
      {"header length past the end", le64(100) + "{}", "runs past the end"},
      {"absurd header length", le64(1ull << 40) + "{}", "too large"},
      {"header not JSON", raw_file("{\"a\": ", 0), "not valid JSON"},
      {"number out of range", raw_file(R"({"a": 1e999})", 0), "not valid JSON (number overflow"},
      {"header not an object", raw_file("[1, 2]", 0), "not a JSON object"},
      {"entry not an object", raw_file(R"({"a": 5})", 0), "must be an object"},
      {"missing dtype", one_entry(R"("shape":[1],"data_offsets":[0,4])"), "missing 'dtype'"},
      {"missing shape", one_entry(R"("dtype":"F32","data_offsets":[0,4])"), "missing 'shape'"},
      {"missing offsets", one_entry(R"("dtype":"F32","shape":[1])"), "missing 'data_offsets'"},
      {"dtype not a string", one_entry(R"("dtype":4,"shape":[1],"data_offsets":[0,4])"), "'dtype' must be a string"},
      {"shape not an array", one_entry(R"("dtype":"F32","shape":"1","data_offsets":[0,4])"), "'shape' must be an array"},
      {"fractional dimension", one_entry(R"("dtype":"F32","shape":[1.5],"data_offsets":[0,4])"), "'shape' must be an array"},
      {"one offset", one_entry(R"("dtype":"F32","shape":[1],"data_offsets":[4])"), "'data_offsets' must be"},
      {"unsupported dtype", one_entry(R"("dtype":"F64","shape":[1],"data_offsets":[0,4])"), "unsupported dtype 'F64'"},
      {"negative dimension", one_entry(R"("dtype":"U8","shape":[-4],"data_offsets":[0,4])"), "negative dimension"},
      {"offset past the data", one_entry(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])"), "out of range"},
      {"negative offset", one_entry(R"("dtype":"F32","shape":[2],"data_offsets":[-4,4])"), "out of range"},
      {"begin after end", one_entry(R"("dtype":"U8","shape":[0],"data_offsets":[4,0])"), "begin > end"},
      {"size mismatch", one_entry(R"("dtype":"F32","shape":[2],"data_offsets":[0,4])"), "needs 8"},
      {"overlapping tensors",
       raw_file("{\"a\":{" + f32_entry + R"(},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4), "overlap"},
      {"metadata not a map", raw_file(R"({"__metadata__":[1]})", 0), "__metadata__ must map strings"},
      {"metadata value not a string", raw_file(R"({"__metadata__":{"k":1}})", 0), "__metadata__ must map strings"},
  };
  ScratchDir dir;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].label);
    const std::string path = dir.file("case" + std::to_string(i) + ".safetensors");
    write_bytes(path, cases[i].bytes);
    expect_error_mentions([&] { SafetensorsFile::open(path); }, {path, cases[i].expected_words});
  }
}

TEST(Safetensors, RejectsMissingFilesAndDirectories) {
  ScratchDir dir;
  expect_error_mentions([&] { SafetensorsFile::open(dir.file("absent.safetensors")); },
                        {dir.file("absent.safetensors"), "cannot open"});
  expect_error_mentions([&] { SafetensorsFile::open(dir.path()); }, {dir.path(), "not a regular file"});
}

TEST(SafetensorsWriter, ReplacesTheTargetAndLeavesNoTemporary) {
  ScratchDir dir;
  const std::string path = dir.file("w.safetensors");
  write_bytes(path, "previous contents");
  SafetensorsWriter writer;
  writer.add("w", patterned(DType::I8, {3}, 1));
  writer.write(path);
  EXPECT_EQ(SafetensorsFile::open(path).names(), std::vector<std::string>{"w"});
  EXPECT_TRUE(leftovers_beside(path).empty());
}

TEST(SafetensorsWriter, FailsIntoAMissingDirectoryLeavingNothing) {
  ScratchDir dir;
  const std::string path = dir.file("missing/w.safetensors");
  SafetensorsWriter writer;
  writer.add("w", patterned(DType::F32, {2}, 1));
  expect_error_mentions([&] { writer.write(path); }, {path, "cannot create"});
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// A FIFO (named pipe) given as a file is refused at once; opening it used to wait forever
// for a writer.
TEST(SafetensorsFile, AFifoIsRefusedNotWaitedOn) {
  ScratchDir dir;
  const std::string fifo = dir.file("pipe.safetensors");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_error_mentions([&] { SafetensorsFile::open(fifo); }, {fifo, "not a regular file"});
}

// Ctrl-C while a file is written (runtime/interrupt.h): the writer stops before its next
// tensor and its temporary goes with the unwinding. In a child process (the flag, once
// set, stays set).
TEST(SafetensorsWriter, AnInterruptLeavesNoFileBehind) {
  ScratchDir dir;
  const std::string path = dir.file("w.safetensors");
  EXPECT_EXIT(
      {
        install_interrupt_handlers();
        std::raise(SIGINT);
        SafetensorsWriter writer;
        writer.add("w", patterned(DType::F32, {2}, 1));
        try {
          writer.write(path);
        } catch (const Interrupted& e) {
          std::exit(fs::is_empty(dir.path()) && std::string(e.what()).find("interrupted") == 0 ? 7 : 1);
        }
        std::exit(2);  // written although interrupted
      },
      ::testing::ExitedWithCode(7), "");
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// The temporary is a fresh "<path>.tmp-XXXXXX": a user's "<path>.tmp" is not touched.
TEST(SafetensorsWriter, LeavesAUsersTmpAlone) {
  ScratchDir dir;
  const std::string path = dir.file("w.safetensors");
  write_bytes(path + ".tmp", "mine");
  SafetensorsWriter writer;
  writer.add("w", patterned(DType::F32, {2}, 1));
  writer.write(path);
  EXPECT_EQ(SafetensorsFile::open(path).names(), std::vector<std::string>{"w"});
  EXPECT_EQ(read_bytes(path + ".tmp"), "mine");
  EXPECT_EQ(leftovers_beside(path), std::vector<std::string>{"w.safetensors.tmp"});
}

// A target that is not a plain file (a directory, a device such as /dev/null, a link) is
// refused before anything is written: the rename would have replaced it (the audit turned
// /dev/null into a regular file through gemlite-logits -o /dev/null).
TEST(SafetensorsWriter, RefusesATargetThatIsNotARegularFile) {
  ScratchDir dir;
  const std::string occupied = dir.file("occupied");
  fs::create_directory(occupied);
  write_bytes(occupied + "/keep", "x");
  const std::string target = dir.file("target"), link = dir.file("link");
  write_bytes(target, "previous contents");
  fs::create_symlink(target, link);
  SafetensorsWriter writer;
  writer.add("w", patterned(DType::F32, {2}, 1));
  for (const std::string& path : {occupied, link}) {
    expect_error_mentions([&] { writer.write(path); }, {path, "not a regular file"});
    EXPECT_TRUE(leftovers_beside(path).empty());
  }
  EXPECT_TRUE(fs::exists(occupied + "/keep"));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_bytes(target), "previous contents");
}

TEST(SafetensorsWriter, RefusesTheReservedMetadataName) {
  SafetensorsWriter writer;
  expect_error_mentions([&] { writer.add("__metadata__", patterned(DType::U8, {1}, 0)); }, {"__metadata__"});
}

}  // namespace
}  // namespace gemlite
