#pragma once
// Runs one of the built programs as a user would, capturing its exit code and output.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <map>
#include <string>

#include "tests/cpu/test_files.h"

namespace gemlite {

struct ProgramRun {
  int exit_code = -1;
  std::string output;  // stdout, or stderr when only_stderr
};

// `arguments` is shell text; stdin comes from `input` (empty = /dev/null).
inline ProgramRun run_program_for_test(const std::string& program, const std::string& arguments,
                                       bool only_stderr, const std::string& input = "") {
  std::string command = std::string(GEMLITE_BINARY_DIR "/") + program + " " + arguments;
  const std::string input_file = make_temp_dir() + "/stdin.txt";
  if (FILE* f = std::fopen(input_file.c_str(), "w")) {
    std::fputs(input.c_str(), f);
    std::fclose(f);
  }
  command += " < " + input_file + (only_stderr ? " 2>&1 >/dev/null" : " 2>/dev/null");
  ProgramRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return run;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) run.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// stories260K converted by gemlite-quantize into `format` with its tokenizer, once per
// format per test program (the directory lives until the program exits).
inline const std::string& quantized_stories260k(const std::string& format) {
  static std::map<std::string, std::string> converted;
  auto found = converted.find(format);
  if (found != converted.end()) return found->second;
  const std::string out = make_temp_dir() + "/stories260K-" + format;
  const ProgramRun run = run_program_for_test(
      "gemlite-quantize",
      shared_file("models/stories260K/stories260K.bin") + " " + out + " " + format + " --tokenizer " +
          shared_file("models/stories260K/tok512.model"),
      true);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return converted.emplace(format, out).first->second;
}

}  // namespace gemlite
