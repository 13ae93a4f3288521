#pragma once
// How deeply TOML text nests, found by a cheap scan before the text reaches the parser: TOML++ recurses once per
// level, so a header such as [a.a.a. ... .a] with tens of thousands of parts overflows the stack. The scan follows
// TOML's lexical rules (strings, comments, headers, keys, arrays and inline tables) without building anything.
#include <cstdint>
#include <optional>
#include <string_view>

namespace crucible::config {

// The first line (1-based) where a table, array or value sits more than `max_depth` levels deep, counting each
// part of a header or dotted key and each enclosing array or inline table; nullopt when none does. A part that an
// earlier [[header]] made an array of tables is one level more in the parsed tree, so the parser sees at most twice
// `max_depth` levels (tested against TOML++ on generated documents).
std::optional<int64_t> line_nested_deeper_than(std::string_view text, int max_depth);

}  // namespace crucible::config
