#pragma once
// Strict reading of TOML configs: every error names the file, the line and the dotted key.
// Unknown keys are errors too (finish()), so a typo never silently falls back to a default.
#include <toml++/toml.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
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

// Parses a file; syntax errors become ConfigError with the parser's line.
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
  int64_t line_of(const std::string& key) const;

  const toml::table* table_;
  std::string file_;
  std::string prefix_;
  std::set<std::string> used_;
};

std::string toml_type_name(const toml::node& n);

}  // namespace crucible::config
