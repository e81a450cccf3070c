#include "runtime/io/json_file.h"

#include <filesystem>
#include <fstream>

#include "runtime/error.h"

namespace gemlite {

nlohmann::json read_json_file(const std::string& path) {
  if (std::filesystem::exists(path) && !std::filesystem::is_regular_file(path))
    fail(path, "not a regular file");  // a directory read as a stream threw a bare filebuf error
  std::ifstream in(path);
  if (!in) fail(path, "cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, "not valid JSON (syntax error at byte " + std::to_string(e.byte) + ")");
  }
}

}  // namespace gemlite
