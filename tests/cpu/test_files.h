#pragma once
// Where tests find the real models and texts (../shared beside the project; a missing
// file makes a test fail, never skip) and where they may write.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace gemlite {

inline std::string shared_file(const std::string& relative_path) {
  return std::string(GEMLITE_SOURCE_DIR "/../shared/") + relative_path;
}

// A fresh directory under the test temp dir, removed with its contents afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::path(::testing::TempDir()) / "gemlite-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A scratch directory that lives until the test program exits (for fixtures shared by
// several tests, e.g. a converted model).
inline std::string make_temp_dir() {
  static std::vector<std::unique_ptr<ScratchDir>> dirs;
  dirs.push_back(std::make_unique<ScratchDir>());
  return dirs.back()->path();
}

// What a writer of `path` may have left beside it: entries named "<name>.tmp..." or
// "<name>.old..." in its folder (packed checkpoints write "<name>.tmp-XXXXXX").
inline std::vector<std::string> leftovers_beside(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  const std::filesystem::path target = p.filename().empty() ? p.parent_path() : p;
  const std::string name = target.filename().string();
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(target.parent_path())) {
    const std::string other = entry.path().filename().string();
    if (other.rfind(name + ".tmp", 0) == 0 || other.rfind(name + ".old", 0) == 0) found.push_back(other);
  }
  return found;
}

}  // namespace gemlite
