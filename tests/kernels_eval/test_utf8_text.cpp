// Untrusted bytes made valid UTF-8 before they enter a verdict or a record.
#include <doctest/doctest.h>

#include <string>

#include "crucible/eval/utf8_sequence.h"
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

// The examples of section 3.9 of the Unicode standard ("U+FFFD Substitution of Maximal Subparts", tables 3-8 to
// 3-12) under both policies of the one reader: one U+FFFD per maximal subpart as the standard lists them, one per
// byte otherwise. They differ only where a subpart is longer than a byte (a sequence cut short).
TEST_CASE("replace_invalid_utf8: the Unicode standard's examples under both replacement policies") {
  using crucible::eval::replace_invalid_utf8;
  using crucible::eval::Utf8Replacement;
  const auto n = [](int count) {
    std::string s;
    for (int k = 0; k < count; ++k) s += R;
    return s;
  };
  struct Row {
    std::string table;
    std::string in, maximal_subpart, each_byte;
  };
  const Row rows[] = {
      {"3-8", "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64",  // a, F1 80 80, E1 80, C2, b, 80, c, 80, BF, d
       "a" + n(3) + "b" + n(1) + "c" + n(2) + "d", "a" + n(6) + "b" + n(1) + "c" + n(2) + "d"},
      {"3-9 non-shortest forms", "\xC0\xAF\xE0\x80\xBF\xF0\x81\x82\x41", n(8) + "A", n(8) + "A"},
      {"3-10 surrogates", "\xED\xA0\x80\xED\xBF\xBF\xED\xAF\x41", n(8) + "A", n(8) + "A"},
      {"3-11 other ill-formed", "\xF4\x91\x92\x93\xFF\x41\x80\xBF\x42", n(5) + "A" + n(2) + "B",
       n(5) + "A" + n(2) + "B"},
      {"3-12 truncated", "\xE1\x80\xE2\xF0\x91\x92\xF1\xBF\x41", n(4) + "A", n(8) + "A"},
      {"cut at the end", "ok\xF0\x9F\x98", "ok" + n(1), "ok" + n(3)},
      {"well-formed", "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80",
       "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.table);
    CHECK(replace_invalid_utf8(row.in, Utf8Replacement::maximal_subpart) == row.maximal_subpart);
    CHECK(replace_invalid_utf8(row.in, Utf8Replacement::each_byte) == row.each_byte);
    CHECK(valid_utf8(row.in) == row.each_byte);  // valid_utf8 is the per-byte policy
  }
}

TEST_CASE("read_utf8 decodes code points and read_utf8_before finds the character ending at an offset") {
  using crucible::eval::append_utf8;
  using crucible::eval::read_utf8;
  using crucible::eval::read_utf8_before;
  const char32_t points[] = {0x24, 0x7F, 0x80, 0xE9, 0x7FF, 0x800, 0x20AC, 0xD7FF, 0xE000, 0xFFFD, 0x10000, 0x1F600,
                             0x10FFFF};
  for (const char32_t cp : points) {
    CAPTURE(static_cast<unsigned>(cp));
    std::string bytes = "x";
    append_utf8(bytes, cp);
    const auto step = read_utf8(bytes, 1);
    CHECK(step.valid);
    CHECK(step.code_point == cp);
    CHECK(1 + step.length == bytes.size());
    const auto back = read_utf8_before(bytes, bytes.size());
    CHECK(back.valid);
    CHECK(back.code_point == cp);
  }
  CHECK_FALSE(read_utf8_before("a\xE2\x82", 3).valid);  // cut short: no character ends there
  CHECK_FALSE(read_utf8_before("\x80\x80\x80\x80\x80", 5).valid);
}
