#include "lm/tokenizer/split_pattern.h"

#include <stdexcept>
#include <string>

#include "lm/tokenizer/unicode_properties.h"
#include "lm/tokenizer/utf8.h"

namespace crucible::lm {
namespace {

constexpr std::string_view qwen2_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view llama3_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view gpt2_regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// o200k_harmony (gpt-oss): words split at case changes, digits in threes, '/' kept after punctuation.
constexpr std::string_view o200k_regex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr char32_t not_a_character = 0xFFFFFFFF;  // stands for an invalid byte: no class matches it

// A character of the text being split, with its byte extent.
struct Char {
  char32_t cp = not_a_character;
  std::size_t end = 0;
};

class PatternMatcher {
 public:
  PatternMatcher(std::string_view text, SplitPattern pattern) : text_(text), pattern_(pattern) {}

  // End of the match that starts at `pos`, or `pos` when none does.
  std::size_t match_at(std::size_t pos) const {
    switch (pattern_) {
      case SplitPattern::gpt2: return match_gpt2(pos);
      case SplitPattern::o200k: return match_o200k(pos);
      default: return match_qwen2_or_llama3(pos);
    }
  }

 private:
  Char at(std::size_t pos) const {
    if (pos >= text_.size()) return {not_a_character, pos};
    const auto byte = static_cast<unsigned char>(text_[pos]);
    if (byte < 0x80) return {byte, pos + 1};
    const Utf8Step step = read_utf8(text_, pos);
    return {step.valid ? step.code_point : not_a_character, pos + (step.valid ? step.length : 1)};
  }
  bool has(std::size_t pos) const { return pos < text_.size(); }

  static bool letter(char32_t cp) { return cp != not_a_character && is_letter(cp); }
  static bool number(char32_t cp) { return cp != not_a_character && is_number(cp); }
  static bool space(char32_t cp) { return cp != not_a_character && is_white_space(cp); }
  static bool newline(char32_t cp) { return cp == '\r' || cp == '\n'; }
  // [^\s\p{L}\p{N}]
  static bool other(char32_t cp) { return !space(cp) && !letter(cp) && !number(cp); }
  // [^\r\n\p{L}\p{N}]: the one character allowed before a word
  static bool word_prefix(char32_t cp) { return !newline(cp) && !letter(cp) && !number(cp); }
  static bool mark(char32_t cp) { return cp != not_a_character && is_mark(cp); }
  // o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]: a word's capitalised head (Lm, Lo and M belong to both classes)
  static bool head(char32_t cp) { return (letter(cp) && !is_lowercase_letter(cp)) || mark(cp); }
  // o200k's [\p{Ll}\p{Lm}\p{Lo}\p{M}]: a word's lower-case tail
  static bool tail(char32_t cp) { return (letter(cp) && !is_upper_or_title_letter(cp)) || mark(cp); }

  template <class Predicate>
  std::size_t skip_while(std::size_t pos, Predicate predicate) const {
    while (has(pos)) {
      const Char c = at(pos);
      if (!predicate(c.cp)) break;
      pos = c.end;
    }
    return pos;
  }

  // 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive. Under Unicode case folding the only non-ASCII
  // character equivalent to one of these letters is U+017F LATIN SMALL LETTER LONG S ('s').
  std::size_t match_contraction(std::size_t pos, bool ignore_case) const {
    if (text_[pos] != '\'' || !has(pos + 1)) return pos;
    auto fold = [ignore_case](char32_t cp) -> char32_t {
      if (!ignore_case) return cp;
      if (cp >= 'A' && cp <= 'Z') return cp - 'A' + 'a';
      return cp == 0x17F ? 's' : cp;
    };
    const Char first = at(pos + 1);
    const char32_t a = fold(first.cp);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return first.end;
    if ((a != 'r' && a != 'v' && a != 'l') || !has(first.end)) return pos;
    const Char second = at(first.end);
    const char32_t b = fold(second.cp);
    if ((a == 'l' && b == 'l') || (a != 'l' && b == 'e')) return second.end;
    return pos;
  }

  // An optional single prefix character accepted by `prefix_ok`, then one or more `body` characters.
  template <class PrefixOk, class Body>
  std::size_t match_prefixed_run(std::size_t pos, PrefixOk prefix_ok, Body body) const {
    const Char first = at(pos);
    if (body(first.cp)) return skip_while(first.end, body);
    if (prefix_ok(first.cp) && has(first.end) && body(at(first.end).cp)) return skip_while(first.end, body);
    return pos;
  }

  // The whitespace alternatives: [with_newline_run] \s*[\r\n]+, then \s+(?!\S), then \s+.
  std::size_t match_white_space(std::size_t pos, bool with_newline_run) const {
    std::size_t end = pos, last_char_start = pos, after_last_newline = pos;
    while (has(end)) {
      const Char c = at(end);
      if (!space(c.cp)) break;
      last_char_start = end;
      if (newline(c.cp)) after_last_newline = c.end;
      end = c.end;
    }
    if (end == pos) return pos;
    // \s* gives back characters until [\r\n]+ can match: the match ends after the run's last newline.
    if (with_newline_run && after_last_newline > pos) return after_last_newline;
    // \s+ followed by a non-space gives back its last character so the lookahead sees whitespace.
    if (!has(end) || last_char_start == pos) return end;
    return last_char_start;
  }

  std::size_t match_qwen2_or_llama3(std::size_t pos) const {
    if (const std::size_t end = match_contraction(pos, true); end != pos) return end;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    const auto letter_prefix = [](char32_t cp) { return !newline(cp) && !letter(cp) && !number(cp); };
    if (const std::size_t end = match_prefixed_run(pos, letter_prefix, letter); end != pos) return end;
    // \p{N} or \p{N}{1,3}
    if (const std::size_t end = match_digits(pos, pattern_ == SplitPattern::llama3 ? 3 : 1); end != pos) return end;
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    const auto ascii_space = [](char32_t cp) { return cp == ' '; };
    if (const std::size_t end = match_prefixed_run(pos, ascii_space, other); end != pos)
      return skip_while(end, newline);
    return match_white_space(pos, true);
  }

  // The optional contraction that may end an o200k word.
  std::size_t with_contraction(std::size_t end) const {
    return has(end) ? match_contraction(end, true) : end;
  }

  // [head]*[tail]+: the head run gives back characters until a tail character can follow, as backtracking does; the
  // last head character that is also a tail one (Lm, Lo, M) is the latest place the tail can start.
  std::size_t match_head_then_tail(std::size_t start) const {
    std::size_t pos = start, last_tail_in_head = std::string_view::npos;
    while (has(pos)) {
      const Char c = at(pos);
      if (!head(c.cp)) break;
      if (tail(c.cp)) last_tail_in_head = pos;
      pos = c.end;
    }
    if (has(pos) && tail(at(pos).cp)) return with_contraction(skip_while(pos, tail));
    if (last_tail_in_head == std::string_view::npos) return start;
    return with_contraction(skip_while(last_tail_in_head, tail));
  }

  // [head]+[tail]*
  std::size_t match_head_run(std::size_t start) const {
    if (!has(start) || !head(at(start).cp)) return start;
    return with_contraction(skip_while(skip_while(start, head), tail));
  }

  // [^\r\n\p{L}\p{N}]? before `word`: with the prefix character first (the greedy ?), then without it.
  template <class Word>
  std::size_t with_optional_prefix(std::size_t pos, Word word) const {
    const Char first = at(pos);
    if (word_prefix(first.cp) && has(first.end))
      if (const std::size_t end = word(first.end); end != first.end) return end;
    return word(pos);
  }

  std::size_t match_o200k(std::size_t pos) const {
    const auto head_then_tail = [this](std::size_t start) { return match_head_then_tail(start); };
    if (const std::size_t end = with_optional_prefix(pos, head_then_tail); end != pos) return end;
    const auto head_run = [this](std::size_t start) { return match_head_run(start); };
    if (const std::size_t end = with_optional_prefix(pos, head_run); end != pos) return end;
    if (const std::size_t end = match_digits(pos, 3); end != pos) return end;
    //  ?[^\s\p{L}\p{N}]+[\r\n/]*
    const auto ascii_space = [](char32_t cp) { return cp == ' '; };
    if (const std::size_t end = match_prefixed_run(pos, ascii_space, other); end != pos)
      return skip_while(end, [](char32_t cp) { return newline(cp) || cp == '/'; });
    return match_white_space(pos, true);
  }

  // \p{N}{1,most}
  std::size_t match_digits(std::size_t pos, int most) const {
    std::size_t end = pos;
    for (int taken = 0; taken < most && has(end) && number(at(end).cp); ++taken) end = at(end).end;
    return end;
  }

  std::size_t match_gpt2(std::size_t pos) const {
    if (const std::size_t end = match_contraction(pos, false); end != pos) return end;
    const auto ascii_space = [](char32_t cp) { return cp == ' '; };
    for (auto body : {letter, number, other})
      if (const std::size_t end = match_prefixed_run(pos, ascii_space, body); end != pos) return end;
    return match_white_space(pos, false);
  }

  std::string_view text_;
  SplitPattern pattern_;
};

}  // namespace

std::string_view split_pattern_regex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::qwen2: return qwen2_regex;
    case SplitPattern::llama3: return llama3_regex;
    case SplitPattern::gpt2: return gpt2_regex;
    case SplitPattern::o200k: return o200k_regex;
  }
  throw std::logic_error("split_pattern_regex: unknown pattern");
}

SplitPattern split_pattern_from_regex(std::string_view regex) {
  for (SplitPattern pattern : {SplitPattern::qwen2, SplitPattern::llama3, SplitPattern::gpt2, SplitPattern::o200k})
    if (regex == split_pattern_regex(pattern)) return pattern;
  throw std::runtime_error("tokenizer.json: unsupported pre-tokenizer Split pattern: " + std::string(regex) +
                           " (supported: the Qwen2, Llama-3, GPT-2 and o200k patterns)");
}

void for_each_split(std::string_view text, SplitPattern pattern, const std::function<void(std::string_view)>& emit) {
  const PatternMatcher matcher(text, pattern);
  std::size_t unmatched_start = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = matcher.match_at(pos);
    if (end == pos) {
      // No alternative matches here (cannot happen for these patterns, which cover every character).
      const Utf8Step step = read_utf8(text, pos);
      pos += step.valid ? step.length : 1;
      continue;
    }
    if (unmatched_start < pos) emit(text.substr(unmatched_start, pos - unmatched_start));
    emit(text.substr(pos, end - pos));
    pos = unmatched_start = end;
  }
  if (unmatched_start < text.size()) emit(text.substr(unmatched_start));
}

std::vector<std::string_view> split_with_pattern(std::string_view text, SplitPattern pattern) {
  std::vector<std::string_view> pieces;
  for_each_split(text, pattern, [&pieces](std::string_view piece) { pieces.push_back(piece); });
  return pieces;
}

}  // namespace crucible::lm
