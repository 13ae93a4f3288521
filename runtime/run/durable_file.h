#pragma once
// Small POSIX file helpers for the run directory: whole-line appends that a crash cannot interleave, fsync, and
// replace-by-rename so a reader (or a resumed run) sees either the old file or the new one, never half of one.
#include <filesystem>
#include <string>

#include "run/run_error.h"

namespace crucible::run {

// An append-only file kept open. Each append is one write(2) on an O_APPEND descriptor, so concurrent appenders
// and a kill -9 can leave at most a torn last line, never two lines mixed together.
class AppendFile {
 public:
  AppendFile() = default;
  explicit AppendFile(const std::filesystem::path& path);
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  ~AppendFile();

  void append(const std::string& text);
  void sync();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// Writes `text` to a temporary file beside `path`, fsyncs it, renames it over `path` and fsyncs the directory.
// Threads may replace the same path at once: each uses its own temporary file and the last rename wins.
void replace_file(const std::filesystem::path& path, const std::string& text);
void sync_file(const std::filesystem::path& path);
void sync_directory(const std::filesystem::path& dir);
std::string read_whole_file(const std::filesystem::path& path);

}  // namespace crucible::run
