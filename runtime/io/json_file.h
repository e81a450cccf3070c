#pragma once
// Reads a whole JSON file (config.json, a safetensors index) with errors that name it.
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/error.h"

namespace gemlite {

// Throws Error("<path>: cannot open") or Error("<path>: not valid JSON (...)").
nlohmann::json read_json_file(const std::string& path);

// nlohmann's message without its "[json.exception.type.id] " prefix, for an error line.
std::string json_error_text(const nlohmann::json::exception& e);

// obj[key] as T, or `fallback` where obj has no such key (or null). A value of another JSON
// type is Error("<path>: <name> is <the value>, not <what>"), e.g. "format_version": "2";
// `name` is the key as the user would find it (quantization_config.format_version).
template <typename T>
T json_value_or(const nlohmann::json& obj, const std::string& key, T fallback, const std::string& path,
                const std::string& name, const char* what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  try {
    return it->template get<T>();
  } catch (const nlohmann::json::exception&) {
    std::string value = it->dump();
    if (value.size() > 40) value = value.substr(0, 37) + "...";
    fail(path, name + " is " + value + ", not " + what);
  }
}

}  // namespace gemlite
