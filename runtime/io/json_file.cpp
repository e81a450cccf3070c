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
  } catch (const nlohmann::json::exception& e) {  // e.g. a number out of range: 1e999
    fail(path, "not valid JSON (" + json_error_text(e) + ")");
  }
}

std::string json_error_text(const nlohmann::json::exception& e) {
  const std::string text = e.what();
  const size_t prefix = text.rfind("] ", text.find(' '));  // "[json.exception.out_of_range.406] "
  return prefix == std::string::npos ? text : text.substr(prefix + 2);
}

}  // namespace gemlite
