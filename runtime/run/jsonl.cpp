#include "run/jsonl.h"

#include <cctype>
#include <fstream>
#include <string>

#include "run/recorded_file.h"

namespace crucible::run {
namespace {

// Far above any run's record file; a bound so that a sparse file of terabytes is refused rather than read.
constexpr std::size_t kMaxJsonlBytes = std::size_t{8} << 30;

bool is_hex4(const std::string& s, std::size_t at) {
  if (at + 4 > s.size()) return false;
  for (std::size_t i = at; i < at + 4; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// The code unit of a \uXXXX escape starting at `at` (the backslash), or -1.
long escape_unit(const std::string& s, std::size_t at) {
  if (at + 1 >= s.size() || s[at] != '\\' || s[at + 1] != 'u' || !is_hex4(s, at + 2)) return -1;
  return std::stol(s.substr(at + 2, 4), nullptr, 16);
}

// The parser's complaint without the text it quotes (records are untrusted and reach terminals).
std::string why_unparseable(const nlohmann::json::parse_error& e, const std::string& line) {
  if (e.byte >= line.size()) return "not JSON: cut short";
  return "not JSON at column " + std::to_string(e.byte);
}

bool is_high(long u) { return u >= 0xD800 && u <= 0xDBFF; }
bool is_low(long u) { return u >= 0xDC00 && u <= 0xDFFF; }

}  // namespace

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

std::string replace_lone_surrogates(const std::string& line) {
  std::string out;
  out.reserve(line.size());
  bool in_string = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (!in_string || c != '\\') {
      if (c == '"') in_string = !in_string;
      out += c;
      continue;
    }
    const long unit = escape_unit(line, i);
    if (unit < 0) {  // another escape: keep it and the character it escapes
      out += line.substr(i, 2);
      ++i;
      continue;
    }
    const bool paired = is_high(unit) && is_low(escape_unit(line, i + 6));
    if (paired) {
      out += line.substr(i, 12);
      i += 11;
    } else {
      out += is_high(unit) || is_low(unit) ? std::string("\\ufffd") : line.substr(i, 6);
      i += 5;
    }
  }
  return out;
}

JsonlLines read_jsonl_lines(const std::filesystem::path& path) {
  JsonlLines out;
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return out;
  const std::string text = read_regular_file(path, kMaxJsonlBytes, /*follow_link=*/false);
  std::size_t start = 0, number = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++number;
    if (line.empty()) continue;
    try {
      out.values.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::parse_error& e) {
      auto repaired = nlohmann::json::parse(replace_lone_surrogates(line), nullptr, /*allow_exceptions=*/false);
      if (repaired.is_discarded()) {
        out.skipped.push_back({number, why_unparseable(e, line)});
        continue;
      }
      out.values.push_back(std::move(repaired));
      ++out.repaired;
    }
    out.value_lines.push_back(number);
  }
  return out;
}

}  // namespace crucible::run
