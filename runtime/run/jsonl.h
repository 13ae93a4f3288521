#pragma once
// Reading the run directory's JSONL files (candidates, steps, journal) back: one JSON value per non-empty line.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace crucible::run {

// A missing file reads as empty. A line that does not parse throws, unless skip_malformed.
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path, bool skip_malformed = false);

struct SkippedLine {
  std::size_t line = 0;  // 1-based
  std::string why;
};

struct JsonlLines {
  std::vector<nlohmann::json> values;
  std::vector<std::size_t> value_lines;  // each value's line, 1-based
  std::vector<SkippedLine> skipped;      // lines that are not JSON, each with the parser's reason
  std::size_t repaired = 0;              // lines read with a lone surrogate escape replaced by U+FFFD
};

// A run directory's JSONL file as a reader of records from elsewhere needs it: every line that parses, and each one
// that does not with its line number and why, so a caller can say what it left out. A lone UTF-16 surrogate escape
// ("\ud800", which JSON writers such as Python's pass through) is read as U+FFFD instead of losing the line. A
// missing file reads as empty; one that is not a regular file (a FIFO, a device, a symbolic link) throws
// RecordedFileError without blocking.
JsonlLines read_jsonl_lines(const std::filesystem::path& path);

// `line` with every lone surrogate escape inside its strings replaced by \ufffd; unchanged when it has none.
std::string replace_lone_surrogates(const std::string& line);

}  // namespace crucible::run
