#pragma once
// The pre-tokenizer regexes of Qwen2 (also Qwen3), Llama-3, GPT-2 and o200k (gpt-oss), matched by hand-written code that reproduces the
// regex engine's leftmost-first alternation and backtracking for exactly these patterns.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace crucible::lm {

// The exact regex texts are in split_pattern_regex().
enum class SplitPattern {
  qwen2,   // case-insensitive contractions, letters with one optional non-letter prefix, single digits,
           // punctuation runs with trailing newlines, whitespace runs
  llama3,  // Qwen2's pattern with digits in groups of up to three
  gpt2,    // case-sensitive contractions; letters, digits and punctuation each with an optional ' ' prefix
  o200k,   // gpt-oss (o200k_harmony): words split before a capital (an upper-case head, a lower-case tail, an
           // optional contraction), digits in groups of up to three, punctuation runs keeping trailing newlines and '/'
};

// The regex text each pattern stands for, as written in tokenizer.json.
std::string_view split_pattern_regex(SplitPattern pattern);

// Recognises a regex by its exact text; throws std::runtime_error for any other.
SplitPattern split_pattern_from_regex(std::string_view regex);

// Splits `text` into the pattern's matches and the (non-empty) text between them, in order: the regex
// split with "Isolated" behaviour. A byte that is not valid UTF-8 counts as one character that is neither
// letter, number nor space.
void for_each_split(std::string_view text, SplitPattern pattern, const std::function<void(std::string_view)>& emit);
std::vector<std::string_view> split_with_pattern(std::string_view text, SplitPattern pattern);

}  // namespace crucible::lm
