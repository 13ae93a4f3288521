#include "lm/tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>

#include "lm/tokenizer/unicode_properties.h"
#include "lm/tokenizer/unicode_tables.h"
#include "lm/tokenizer/utf8.h"

namespace crucible::lm {
namespace {

namespace tables = unicode_tables;

// Hangul syllables are composed arithmetically from leading consonant (L), vowel (V) and trailing
// consonant (T) jamo (Unicode standard, section 3.12).
constexpr char32_t hangul_s_base = 0xAC00, hangul_l_base = 0x1100, hangul_v_base = 0x1161, hangul_t_base = 0x11A7;
constexpr char32_t hangul_l_count = 19, hangul_v_count = 21, hangul_t_count = 28;
constexpr char32_t hangul_n_count = hangul_v_count * hangul_t_count;
constexpr char32_t hangul_s_count = hangul_l_count * hangul_n_count;

bool is_hangul_syllable(char32_t cp) { return cp >= hangul_s_base && cp < hangul_s_base + hangul_s_count; }

void append_decomposition(std::u32string& out, char32_t cp) {
  if (is_hangul_syllable(cp)) {
    const char32_t index = cp - hangul_s_base;
    out.push_back(hangul_l_base + index / hangul_n_count);
    out.push_back(hangul_v_base + (index % hangul_n_count) / hangul_t_count);
    if (index % hangul_t_count != 0) out.push_back(hangul_t_base + index % hangul_t_count);
    return;
  }
  const auto& table = tables::decompositions;
  const auto* it =
      std::lower_bound(table.begin(), table.end(), cp,
                       [](const tables::Decomposition& d, char32_t value) { return d.code_point < value; });
  if (it == table.end() || it->code_point != cp) {
    out.push_back(cp);
    return;
  }
  out.append(tables::decomposition_pool + it->offset, it->length);
}

// Stable sort of every run of non-starters by combining class.
void order_canonically(std::u32string& text) {
  std::size_t i = 0;
  while (i < text.size()) {
    if (combining_class(text[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && combining_class(text[end]) != 0) ++end;
    if (end - i > 1)
      std::stable_sort(text.begin() + i, text.begin() + end,
                       [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }
}

// The primary composite of (first, second), or 0 when there is none.
char32_t compose_pair(char32_t first, char32_t second) {
  if (first >= hangul_l_base && first < hangul_l_base + hangul_l_count && second >= hangul_v_base &&
      second < hangul_v_base + hangul_v_count)
    return hangul_s_base + ((first - hangul_l_base) * hangul_v_count + (second - hangul_v_base)) * hangul_t_count;
  if (is_hangul_syllable(first) && (first - hangul_s_base) % hangul_t_count == 0 && second > hangul_t_base &&
      second < hangul_t_base + hangul_t_count)
    return first + (second - hangul_t_base);
  const auto& table = tables::compositions;
  const auto* it = std::lower_bound(table.begin(), table.end(), std::pair{first, second},
                                    [](const tables::Composition& c, const std::pair<char32_t, char32_t>& key) {
                                      return std::pair{c.first, c.second} < key;
                                    });
  if (it == table.end() || it->first != first || it->second != second) return 0;
  return it->composite;
}

void compose(std::u32string& text) {
  if (text.empty()) return;
  std::size_t starter = 0;
  // Class of the last character kept after the starter; 256 marks "no starter yet".
  int last_class = combining_class(text[0]) == 0 ? 0 : 256;
  std::size_t kept = 1;
  for (std::size_t i = 1; i < text.size(); ++i) {
    const char32_t cp = text[i];
    const int cp_class = combining_class(cp);
    const bool blocked = !(last_class < cp_class || last_class == 0);
    const char32_t composite = blocked ? 0 : compose_pair(text[starter], cp);
    if (composite != 0) {
      text[starter] = composite;
      continue;
    }
    if (cp_class == 0) starter = kept;
    last_class = cp_class;
    text[kept++] = cp;
  }
  text.resize(kept);
}

}  // namespace

std::string nfc(std::string_view text) {
  require_valid_utf8(text, "nfc");
  bool stable = true;
  for (std::size_t pos = 0; pos < text.size() && stable;) {
    const Utf8Step step = read_utf8(text, pos);
    stable = step.code_point < tables::nfc_stable_below;
    pos += step.length;
  }
  if (stable) return std::string(text);
  std::u32string decomposed;
  decomposed.reserve(text.size());
  for (char32_t cp : decode_utf8(text)) append_decomposition(decomposed, cp);
  order_canonically(decomposed);
  compose(decomposed);
  return encode_utf8(decomposed);
}

}  // namespace crucible::lm
