#include "runtime/io/json_file.h"

#include <fstream>

#include "runtime/error.h"
#include "runtime/io/readable_file.h"

namespace gemlite {

nlohmann::json read_json_file(const std::string& path) {
  require_readable_file(path);
  std::ifstream in(path);
  if (!in) fail(path, "cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, "not valid JSON (syntax error at byte " + std::to_string(e.byte) + ")");
  }
}

}  // namespace gemlite
