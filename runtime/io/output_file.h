#pragma once
// What every file writer here does before it writes: refuse a target that is not a plain
// file, and write a fresh temporary beside it that is renamed into place at the end (a
// failed run leaves the old file, and never a half-written one).
#include <string>

namespace gemlite {

// Error("<path>: ...") unless `path` is absent or a regular file. A device (/dev/null), a
// directory or a symbolic link would be replaced by the rename, not written through.
void check_output_file(const std::string& path);

// Creates an empty "<path>.tmp-XXXXXX" of this process's own (mkstemp; a plain file's
// permissions) and returns its name. Error naming `path` when that is not possible.
std::string make_temp_file_beside(const std::string& path);

// The mode open() or mkdir() would give a new file (0666) or directory (0777) under this
// process's umask: mkstemp / mkdtemp make theirs 0600 / 0700, which a rename would keep.
unsigned plain_mode(unsigned requested);

}  // namespace gemlite
