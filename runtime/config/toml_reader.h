#pragma once
// Strict reading of TOML configs: every error names the file, the line and the dotted key.
// Unknown keys are errors too (finish()), so a typo never silently falls back to a default. Strings holding a NUL byte
// are refused (every path and name would be cut at it), and echoed text in messages is bounded (config/excerpt.h).
#include <toml++/toml.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace crucible::config {

class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string file, int64_t line, std::string key, const std::string& message);
  const std::string& file() const { return file_; }
  int64_t line() const { return line_; }
  const std::string& key() const { return key_; }

 private:
  std::string file_;
  int64_t line_;
  std::string key_;
};

// What any TOML text may be before it reaches the parser: configs are small and shallow, and the parser recurses
// once per level of nesting (a header of 50,000 parts would overflow the stack).
constexpr std::size_t kMaxTomlBytes = 1 << 20;
constexpr int kMaxTomlDepth = 32;  // parts of headers and dotted keys, plus enclosing arrays and inline tables

// Parses a file; syntax errors become ConfigError with the parser's line, and a file over the bounds above (or not a
// regular file) is refused before it is parsed.
toml::table parse_toml_file(const std::filesystem::path& path);
// The same for text held in memory; `file` names it in errors.
toml::table parse_toml_text(const std::string& text, const std::string& file);

class TableReader {
 public:
  TableReader(const toml::table& table, std::string file, std::string prefix = {});

  bool has(const std::string& key) const;
  std::string require_string(const std::string& key);
  int64_t require_int(const std::string& key);
  double require_number(const std::string& key);  // integers accepted
  std::string get_string(const std::string& key, const std::string& fallback);
  int64_t get_int(const std::string& key, int64_t fallback);
  double get_number(const std::string& key, double fallback);
  bool get_bool(const std::string& key, bool fallback);
  // An integer in [lo, hi], checked before any narrowing (4294967297 must not become 1 in an int); a float is refused.
  int64_t get_int_in(const std::string& key, int64_t fallback, int64_t lo, int64_t hi);
  template <class Int>
  Int get_int_in(const std::string& key, Int fallback, Int lo, Int hi) {
    static_assert(std::is_integral_v<Int> && (std::is_signed_v<Int> ? sizeof(Int) <= 8 : sizeof(Int) < 8),
                  "TOML integers are int64_t: read a uint64_t as a non-negative int64_t");
    // lo and hi are Ints, so every value in range converts exactly.
    return static_cast<Int>(
        get_int_in(key, static_cast<int64_t>(fallback), static_cast<int64_t>(lo), static_cast<int64_t>(hi)));
  }
  // Integers in [lo, hi], at most max_count of them; empty when absent.
  std::vector<int64_t> get_int_array_in(const std::string& key, int64_t lo, int64_t hi, std::size_t max_count);
  std::vector<std::string> get_string_array(const std::string& key);
  // Strings and integers, as strings (for shapes such as ["M", 3]).
  std::vector<std::string> require_scalar_array(const std::string& key);
  std::vector<double> get_number_array(const std::string& key);
  TableReader require_table(const std::string& key);
  std::optional<TableReader> get_table(const std::string& key);
  std::vector<TableReader> require_table_array(const std::string& key);
  // Keys present in the table, e.g. for tables whose keys are names.
  std::vector<std::string> keys() const;
  const toml::node* node(const std::string& key) const;

  // Throws on any key that none of the calls above touched.
  void finish() const;

  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  std::string path(const std::string& key) const;  // dotted key for messages
  const std::string& file() const { return file_; }

 private:
  const toml::node& require(const std::string& key);
  // n as a string (refused when not one, or when it holds a NUL); `expected` starts the type error.
  std::string string_of(const std::string& key, const toml::node& n, const char* expected) const;
  int64_t line_of(const std::string& key) const;

  const toml::table* table_;
  std::string file_;
  std::string prefix_;
  std::set<std::string> used_;
};

std::string toml_type_name(const toml::node& n);

}  // namespace crucible::config
