#include "run/jsonl.h"

#include <fstream>
#include <string>

namespace crucible::run {

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path, bool skip_malformed) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto value = nlohmann::json::parse(line, nullptr, !skip_malformed);
    if (!value.is_discarded()) out.push_back(std::move(value));
  }
  return out;
}

}  // namespace crucible::run
