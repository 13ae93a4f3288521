#include "lm/tokenizer/unicode_properties.h"

#include <algorithm>
#include <array>

#include "lm/tokenizer/unicode_tables.h"

namespace crucible::lm {
namespace {

namespace tables = unicode_tables;

enum CharFlag : std::uint8_t {
  letter_flag = 1,
  number_flag = 2,
  white_space_flag = 4,
  lowercase_flag = 8,
  upper_or_title_flag = 16,
  mark_flag = 32,
};
constexpr char32_t bmp_size = 0x10000;

bool in_ranges(const tables::Table<tables::CodePointRange>& ranges, char32_t code_point) {
  const auto* it = std::upper_bound(ranges.begin(), ranges.end(), code_point,
                                    [](char32_t value, const tables::CodePointRange& r) { return value < r.first; });
  return it != ranges.begin() && code_point <= (it - 1)->last;
}

// The pre-tokenizer asks about every character, so the Basic Multilingual Plane gets a direct lookup.
const std::array<std::uint8_t, bmp_size>& bmp_flags() {
  static const auto flags = [] {
    std::array<std::uint8_t, bmp_size> out{};
    auto mark = [&out](const tables::Table<tables::CodePointRange>& ranges, std::uint8_t flag) {
      for (const auto& range : ranges)
        for (char32_t cp = range.first; cp <= range.last && cp < bmp_size; ++cp) out[cp] |= flag;
    };
    mark(tables::letters, letter_flag);
    mark(tables::numbers, number_flag);
    mark(tables::white_space, white_space_flag);
    mark(tables::lowercase_letters, lowercase_flag);
    mark(tables::upper_or_title_letters, upper_or_title_flag);
    mark(tables::marks, mark_flag);
    return out;
  }();
  return flags;
}

bool has_flag(char32_t code_point, std::uint8_t flag, const tables::Table<tables::CodePointRange>& ranges) {
  if (code_point < bmp_size) return (bmp_flags()[code_point] & flag) != 0;
  return in_ranges(ranges, code_point);
}

}  // namespace

bool is_letter(char32_t code_point) { return has_flag(code_point, letter_flag, tables::letters); }
bool is_number(char32_t code_point) { return has_flag(code_point, number_flag, tables::numbers); }
bool is_lowercase_letter(char32_t code_point) { return has_flag(code_point, lowercase_flag, tables::lowercase_letters); }
bool is_upper_or_title_letter(char32_t code_point) {
  return has_flag(code_point, upper_or_title_flag, tables::upper_or_title_letters);
}
bool is_mark(char32_t code_point) { return has_flag(code_point, mark_flag, tables::marks); }
bool is_white_space(char32_t code_point) { return has_flag(code_point, white_space_flag, tables::white_space); }

std::uint8_t combining_class(char32_t code_point) {
  const auto& ranges = tables::combining_classes;
  const auto* it =
      std::upper_bound(ranges.begin(), ranges.end(), code_point,
                       [](char32_t value, const tables::CombiningClassRange& r) { return value < r.first; });
  if (it == ranges.begin() || code_point > (it - 1)->last) return 0;
  return (it - 1)->combining_class;
}

}  // namespace crucible::lm
