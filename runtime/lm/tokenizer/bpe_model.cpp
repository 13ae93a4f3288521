#include "lm/tokenizer/bpe_model.h"

#include <queue>
#include <stdexcept>

#include "lm/tokenizer/byte_level.h"
#include "lm/tokenizer/utf8.h"

namespace crucible::lm {
namespace {

struct Symbol {
  TokenId id;
  int prev;
  int next;
  bool removed;
};

// A pending merge of the symbol at `pos` with its right neighbour. The queue pops the lowest rank first,
// and among equal ranks the leftmost position.
struct PendingMerge {
  std::uint32_t rank;
  int pos;
  TokenId merged;
  bool operator>(const PendingMerge& other) const {
    return rank != other.rank ? rank > other.rank : pos > other.pos;
  }
};

}  // namespace

BpeModel::BpeModel(BpeModelSpec spec) : vocab_(std::move(spec.vocab)), ignore_merges_(spec.ignore_merges) {
  TokenId max_id = -1;
  for (const auto& [token, id] : vocab_) {
    if (id < 0) throw std::runtime_error("tokenizer.json: negative id for vocabulary token " + token);
    max_id = std::max(max_id, id);
  }
  tokens_by_id_.resize(static_cast<std::size_t>(max_id + 1));
  for (const auto& [token, id] : vocab_) tokens_by_id_[id] = token;

  for (unsigned byte = 0; byte < byte_ids_.size(); ++byte) {
    std::string character;
    append_utf8(character, byte_to_unicode(static_cast<unsigned char>(byte)));
    const auto it = vocab_.find(character);
    byte_ids_[byte] = it == vocab_.end() ? -1 : it->second;
  }
  if (ignore_merges_) {
    for (const auto& [token, id] : vocab_) {
      std::string bytes;
      if (append_byte_level_bytes(bytes, token)) vocab_by_bytes_.emplace(std::move(bytes), id);
    }
  }

  merges_.reserve(spec.merges.size());
  for (std::size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const auto left_id = vocab_.find(left), right_id = vocab_.find(right), merged_id = vocab_.find(left + right);
    if (left_id == vocab_.end() || right_id == vocab_.end() || merged_id == vocab_.end())
      throw std::runtime_error("tokenizer.json: merge \"" + left + " " + right + "\" (rank " +
                               std::to_string(rank) + ") uses a token missing from the vocabulary");
    // A repeated pair keeps its last rank.
    merges_[pair_key(left_id->second, right_id->second)] = Merge{static_cast<std::uint32_t>(rank), merged_id->second};
  }
}

const BpeModel::Merge* BpeModel::find_merge(TokenId left, TokenId right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_by_bytes_.find(std::string(word));
    if (it != vocab_by_bytes_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (char byte : word) {
    const TokenId id = byte_ids_[static_cast<unsigned char>(byte)];
    if (id < 0) continue;
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, false});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<PendingMerge, std::vector<PendingMerge>, std::greater<>> queue;
  for (int pos = 0; pos + 1 < static_cast<int>(symbols.size()); ++pos)
    if (const Merge* merge = find_merge(symbols[pos].id, symbols[pos + 1].id))
      queue.push({merge->rank, pos, merge->merged});

  while (!queue.empty()) {
    const PendingMerge top = queue.top();
    queue.pop();
    Symbol& current = symbols[top.pos];
    if (current.removed || current.next < 0) continue;
    Symbol& right = symbols[current.next];
    // Entries go stale when a neighbour merged first; the reference checks only the merged id.
    const Merge* still = find_merge(current.id, right.id);
    if (still == nullptr || still->merged != top.merged) continue;

    current.id = top.merged;
    right.removed = true;
    current.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (current.prev >= 0)
      if (const Merge* merge = find_merge(symbols[current.prev].id, current.id))
        queue.push({merge->rank, current.prev, merge->merged});
    if (current.next >= 0)
      if (const Merge* merge = find_merge(current.id, symbols[current.next].id))
        queue.push({merge->rank, top.pos, merge->merged});
  }
  for (const Symbol& symbol : symbols)
    if (!symbol.removed) out.push_back(symbol.id);
}

std::optional<TokenId> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= tokens_by_id_.size() || !tokens_by_id_[id]) return nullptr;
  return &*tokens_by_id_[id];
}

}  // namespace crucible::lm
