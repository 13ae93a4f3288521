#include "lm/tokenizer/pre_tokenizer.h"

namespace crucible::lm {
namespace {

void apply_byte_level(std::string_view piece, const ByteLevelOptions& options,
                      const std::function<void(std::string_view)>& emit) {
  std::string prefixed;
  if (options.add_prefix_space && piece.front() != ' ') {
    prefixed = " ";
    prefixed += piece;
    piece = prefixed;
  }
  if (options.use_regex)
    for_each_split(piece, SplitPattern::gpt2, emit);
  else
    emit(piece);
}

void apply_steps(const PreTokenizer& pre_tokenizer, std::size_t step, std::string_view piece,
                 const std::function<void(std::string_view)>& emit) {
  if (piece.empty()) return;
  if (step == pre_tokenizer.splits.size()) {
    apply_byte_level(piece, pre_tokenizer.byte_level, emit);
    return;
  }
  for_each_split(piece, pre_tokenizer.splits[step],
                 [&](std::string_view part) { apply_steps(pre_tokenizer, step + 1, part, emit); });
}

}  // namespace

void PreTokenizer::for_each_piece(std::string_view text, const std::function<void(std::string_view)>& emit) const {
  apply_steps(*this, 0, text, emit);
}

std::vector<std::string> PreTokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  for_each_piece(text, [&pieces](std::string_view piece) { pieces.emplace_back(piece); });
  return pieces;
}

}  // namespace crucible::lm
