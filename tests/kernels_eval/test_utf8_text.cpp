// Untrusted bytes made valid UTF-8 before they enter a verdict or a record.
#include <doctest/doctest.h>

#include <string>

#include "crucible/eval/utf8_text.h"

using crucible::eval::valid_utf8;
using crucible::eval::valid_utf8_prefix;

namespace {
const std::string R = "\xEF\xBF\xBD";  // U+FFFD
}

TEST_CASE("valid_utf8 keeps well-formed text and replaces each ill-formed byte") {
  struct Row {
    std::string in, out;
  };
  const Row rows[] = {
      {"", ""},
      {"plain ascii\n", "plain ascii\n"},
      {"\xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "\xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"},
      {"#warning \xFF\xFE", "#warning " + R + R},       // g++ copies a #warning's bytes verbatim
      {"\x80x", R + "x"},                                // a stray continuation byte
      {"\xC0\xAF", R + R},                               // an overlong '/'
      {"\xE0\x80\xAF", R + R + R},                       // an overlong three-byte form
      {"\xED\xA0\x80", R + R + R},                       // a UTF-16 surrogate
      {"\xF4\x90\x80\x80", R + R + R + R},               // above U+10FFFF
      {"ab\xE2\x82", "ab" + R + R},                      // a character cut short at the end
      {"\xE2\x82x", R + R + "x"},                        // ... and in the middle
      {std::string("a\0b", 3), std::string("a\0b", 3)},  // NUL is valid UTF-8 (JSON escapes it)
  };
  for (const auto& row : rows) {
    CAPTURE(row.in);
    CHECK(valid_utf8(row.in) == row.out);
  }
}

TEST_CASE("valid_utf8_prefix never cuts inside a character") {
  const std::string euro = "\xE2\x82\xAC";
  const std::string text = "ab" + euro + "cd";
  CHECK(valid_utf8_prefix(text, 100) == text);
  CHECK(valid_utf8_prefix(text, 2) == "ab");
  CHECK(valid_utf8_prefix(text, 3) == "ab");  // inside the euro sign: cut before it
  CHECK(valid_utf8_prefix(text, 4) == "ab");
  CHECK(valid_utf8_prefix(text, 5) == "ab" + euro);
  CHECK(valid_utf8_prefix("\xFF\xFF\xFF", 7) == R + R);  // replacements count: never longer than the limit
  CHECK(valid_utf8_prefix("\xFF\xFF\xFF", 2).empty());
}
