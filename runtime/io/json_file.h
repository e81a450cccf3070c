#pragma once
// Reads a whole JSON file (config.json, a safetensors index) with errors that name it.
#include <nlohmann/json.hpp>
#include <string>

namespace gemlite {

// Throws Error("<path>: cannot open") or Error("<path>: not valid JSON (...)").
nlohmann::json read_json_file(const std::string& path);

}  // namespace gemlite
