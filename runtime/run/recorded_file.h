#pragma once
// Reading files that a run's records name, from a run directory that may have come from anyone: a record can say
// `sources/x.cpp` while sources/x.cpp is a symbolic link to /etc/passwd, a FIFO that blocks any reader, or
// /dev/zero. Every reader of a run directory (report, show, sft-data) opens such files here and nowhere else.
#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace crucible::run {

// Why a file was refused, naming it: not a path under sources/, a symbolic link, not a regular file, outside the
// directory, larger than the cap, or unreadable.
struct RecordedFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Generous for one kernel's source; far less than an accident (or /dev/zero) would read.
constexpr std::size_t kMaxRecordedSourceBytes = std::size_t{4} << 20;

// The text of `source_file` (a record's relative path, e.g. sources/<sha256>.cpp) under `run_dir`: only a regular
// file, opened without following a final symbolic link, whose resolved path stays inside `run_dir`, and at most
// `max_bytes` long. Never blocks on a FIFO or device. Throws RecordedFileError.
std::string read_recorded_source(const std::filesystem::path& run_dir, const std::string& source_file,
                                 std::size_t max_bytes = kMaxRecordedSourceBytes);

// The whole of `path` when it is a regular file (a FIFO, device or directory is refused without blocking), at most
// `max_bytes` long. A final symbolic link is followed only when `follow_link`. Throws RecordedFileError.
std::string read_regular_file(const std::filesystem::path& path, std::size_t max_bytes, bool follow_link);

}  // namespace crucible::run
