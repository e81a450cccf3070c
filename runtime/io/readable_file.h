#pragma once
// The one check that a file the programs read is there, is a regular file and can be
// opened, made before a reader whose own failures say less: sentencepiece says "not found"
// for an unreadable file too, a stream over a directory threw a bare filebuf error, and a
// link to /dev/zero read forever.
#include <string>

namespace gemlite {

// Throws Error("<path>: no such file"), Error("<path>: not a regular file") (a directory,
// a device or a FIFO, or a link to one), or Error("<path>: cannot open: <reason>"), e.g.
// "Permission denied".
void require_readable_file(const std::string& path);

}  // namespace gemlite
