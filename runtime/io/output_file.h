#pragma once
// What every file writer here does before it writes: refuse a target that is not a plain
// file, and write a fresh temporary beside it that is renamed into place at the end (a
// failed run leaves the old file, and never a half-written one).
#include <cstdio>
#include <functional>
#include <string>

namespace gemlite {

// Error("<path>: ...") unless `path` is absent or a regular file. A device (/dev/null), a
// directory or a symbolic link would be replaced by the rename, not written through.
void check_output_file(const std::string& path);

// check_output_file, and an existing file is replaced only when `is_earlier_output(path)`
// says a writer of this kind made it: otherwise Error("<path>: exists and is not <what>: not
// replaced ..."). (A forgotten --kl-divergence had overwritten the base it was to compare
// with, and gemlite-logits -o prompt.txt the prompt.)
void check_replaceable_output(const std::string& path, const std::string& what,
                              const std::function<bool(const std::string&)>& is_earlier_output);

// Creates an empty "<path>.tmp-XXXXXX" of this process's own (mkstemp; a plain file's
// permissions) and returns its name. Error naming `path` when that is not possible.
std::string make_temp_file_beside(const std::string& path);

// The mode open() or mkdir() would give a new file (0666) or directory (0777) under this
// process's umask: mkstemp / mkdtemp make theirs 0600 / 0700, which a rename would keep.
unsigned plain_mode(unsigned requested);

// Writes <path>.tmp-XXXXXX (make_temp_file_beside) and renames it to <path> on commit().
// Until then the destructor removes the temporary, so a failure (an Error, an interrupt
// unwinding the stack) leaves neither a partial file nor a changed <path>. Every write
// fails at once, naming <path>, when the bytes do not go out (a full disk).
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);  // check_output_file(path) first
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* bytes, size_t size);
  void commit();
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_, temp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

}  // namespace gemlite
