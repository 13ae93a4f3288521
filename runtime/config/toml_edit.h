#pragma once
// Changing one string value in TOML text without re-serialising the rest: comments, order and line numbers stay as
// the user wrote them, so errors about other keys still name the lines of the file.
#include <string>
#include <string_view>

namespace crucible::config {

// `value` as a TOML basic string, quotes included (backslashes, quotes and control characters escaped).
std::string toml_basic_string(std::string_view value);

// `text` with the string at `key_path` (dotted, e.g. "tasks.dir") replaced by `value`; the text unchanged when the
// key is absent or not a string. `file` names the text in parse errors.
std::string with_string_value(const std::string& text, const std::string& file, std::string_view key_path,
                              std::string_view value);

}  // namespace crucible::config
