#pragma once
// Whether a file can be opened for reading, checked before a library that reports every
// failure alike (sentencepiece says "not found" for an unreadable file too).
#include <string>

namespace gemlite {

// Throws Error("<path>: no such file") or Error("<path>: cannot open: <reason>"), e.g.
// "Permission denied".
void require_readable_file(const std::string& path);

}  // namespace gemlite
