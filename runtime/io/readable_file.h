#pragma once
// The one check that a file the programs read is there, is a regular file and can be
// opened, made before a reader whose own failures say less: sentencepiece says "not found"
// for an unreadable file too, a stream over a directory threw a bare filebuf error, and a
// link to /dev/zero read forever.
#include <filesystem>
#include <string>

namespace gemlite {

// Throws Error("<path>: no such file"), Error("<path>: not a regular file") (a directory,
// a device or a FIFO, or a link to one), or Error("<path>: cannot open: <reason>"), e.g.
// "Permission denied".
void require_readable_file(const std::string& path);

// What is at `path`, links followed: file_type::not_found when nothing is. Throws
// Error("<path>: cannot access: <reason>") when the system cannot tell (a symlink loop, a
// name too long, a folder without search permission); std::filesystem's own exception
// had reached the user as "filesystem error: status: ... [path]".
std::filesystem::file_type file_type_at(const std::string& path);
inline bool path_exists(const std::string& path) {
  return file_type_at(path) != std::filesystem::file_type::not_found;
}
inline bool is_directory_path(const std::string& path) {
  return file_type_at(path) == std::filesystem::file_type::directory;
}

}  // namespace gemlite
