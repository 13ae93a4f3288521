#include "config/toml_edit.h"

#include <cstdio>

#include "config/toml_reader.h"

namespace crucible::config {
namespace {

// The byte offset of a TOML source position (1-based line, 1-based column counted in UTF-8 characters).
std::size_t offset_of(const std::string& text, const toml::source_position& at) {
  std::size_t i = 0;
  for (toml::source_index line = 1; line < at.line && i < text.size(); ++i)
    if (text[i] == '\n') ++line;
  for (toml::source_index column = 1; column < at.column && i < text.size();) {
    ++i;
    while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;  // continuation bytes
    ++column;
  }
  return i;
}

}  // namespace

std::string toml_basic_string(std::string_view value) {
  std::string out = "\"";
  for (const char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte == 0x7F) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04X", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string with_string_value(const std::string& text, const std::string& file, std::string_view key_path,
                              std::string_view value) {
  const toml::table table = parse_toml_text(text, file);
  const auto node = table.at_path(key_path);
  if (!node || !node.is_string()) return text;
  const auto& region = node.node()->source();
  const std::size_t begin = offset_of(text, region.begin), end = offset_of(text, region.end);
  // A multi-line string's lines are kept as blank lines, so every later key keeps its line number.
  const std::string lines_kept(region.end.line - region.begin.line, '\n');
  return text.substr(0, begin) + toml_basic_string(value) + lines_kept + text.substr(end);
}

}  // namespace crucible::config
