#pragma once
// Shared by the file-format tests: a scratch directory per test and a check that an action
// fails with a one-line gemlite::Error mentioning the expected fragments.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/cpu/test_files.h"

namespace gemlite {

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void expect_error_mentions(const std::function<void()>& action,
                                  const std::vector<std::string>& fragments) {
  try {
    action();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    for (const std::string& fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << message;
    return;
  }
  ADD_FAILURE() << "no gemlite::Error was thrown";
}

}  // namespace gemlite
