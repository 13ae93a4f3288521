#pragma once
// The real gpt-oss (o200k_harmony), Qwen3 and Llama 3.1 tokenizers that tools/install_tokenizers.sh fetches, for the
// tests that need them: found under $CRUCIBLE_TOKENIZERS_DIR or ~/.cache/crucible/tokenizers, absent on a machine
// without them (the caller then skips with a message).
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "lm/tokenizer/bpe_tokenizer.h"

namespace crucible::test {

inline std::filesystem::path real_tokenizers_dir() {
  if (const char* dir = std::getenv("CRUCIBLE_TOKENIZERS_DIR"); dir && *dir) return dir;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home ? home : "/root") / ".cache" / "crucible" / "tokenizers";
}

// `name`: gptoss, qwen3 or llama3_1. The file's directory, when it is installed.
inline std::optional<std::filesystem::path> real_tokenizer_dir(const std::string& name) {
  const auto dir = real_tokenizers_dir() / name;
  if (std::filesystem::exists(dir / "tokenizer.json")) return dir;
  return std::nullopt;
}

// Loaded once per test binary; null when not installed.
inline const lm::Tokenizer* real_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<lm::Tokenizer>> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    const auto dir = real_tokenizer_dir(name);
    it = loaded.emplace(name, dir ? std::make_unique<lm::Tokenizer>(lm::Tokenizer::from_file(dir->string())) : nullptr).first;
  }
  return it->second.get();
}

inline std::string real_tokenizer_missing(const std::string& name) {
  return "skipped: the real " + name + " tokenizer is not installed under " + real_tokenizers_dir().string() +
         " (bash tools/install_tokenizers.sh)";
}

}  // namespace crucible::test
