#pragma once
// One error type for everything a user can cause: a missing or corrupt file, a bad flag,
// a shape that does not fit. The message is one line that names the file (or flag) and
// the problem; the programs print it and exit 1.
#include <stdexcept>
#include <string>

namespace gemlite {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws Error("<where>: <what>") so every message names its source the same way.
[[noreturn]] inline void fail(const std::string& where, const std::string& what) {
  throw Error(where + ": " + what);
}

}  // namespace gemlite
