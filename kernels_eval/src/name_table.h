#pragma once
// An enum's names for the text edges (JSON, TOML, the command line), written once as a table: the name of a value
// and the value of a name both come from it, so adding a value is one line.
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace crucible::eval {

template <class Enum, std::size_t N>
using NameTable = std::array<std::pair<Enum, std::string_view>, N>;

template <class Enum, std::size_t N>
constexpr std::string_view name_in(const NameTable<Enum, N>& table, Enum value) {
  for (const auto& [v, name] : table)
    if (v == value) return name;
  return {};
}

template <class Enum, std::size_t N>
constexpr std::optional<Enum> value_in(const NameTable<Enum, N>& table, std::string_view name) {
  for (const auto& [v, n] : table)
    if (n == name) return v;
  return std::nullopt;
}

// "a, b, c": the names a refusal lists.
template <class Enum, std::size_t N>
std::string names_in(const NameTable<Enum, N>& table) {
  std::string out;
  for (const auto& entry : table) out += (out.empty() ? "" : ", ") + std::string(entry.second);
  return out;
}

}  // namespace crucible::eval
