#include "config/toml_reader.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "config/excerpt.h"
#include "config/text_file.h"
#include "config/toml_nesting.h"

namespace crucible::config {
namespace {
// Keys and messages echo the config's own text (a key, a value): each is bounded, so the error stays one short line.
std::string format(const std::string& file, int64_t line, const std::string& key, const std::string& message) {
  std::ostringstream s;
  s << excerpt(file, 512);
  if (line > 0) s << ":" << line;
  if (!key.empty()) s << ": key '" << excerpt(key, 120) << "'";
  s << ": " << excerpt(message, 600);
  return s.str();
}
}  // namespace

ConfigError::ConfigError(std::string file, int64_t line, std::string key, const std::string& message)
    : std::runtime_error(format(file, line, key, message)), file_(std::move(file)), line_(line), key_(std::move(key)) {}

std::string toml_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "nothing";
  }
}

toml::table parse_toml_file(const std::filesystem::path& path) {
  std::string text;
  try {
    text = read_text_file(path, kMaxTomlBytes);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(path.string(), 0, "", e.what());
  }
  return parse_toml_text(text, path.string());
}

toml::table parse_toml_text(const std::string& text, const std::string& file) {
  if (text.size() > kMaxTomlBytes)
    throw ConfigError(file, 0, "", "larger than " + std::to_string(kMaxTomlBytes) + " bytes");
  if (const auto line = line_nested_deeper_than(text, kMaxTomlDepth))
    throw ConfigError(file, *line, "", "nested deeper than " + std::to_string(kMaxTomlDepth) +
                                          " levels (parts of table headers and dotted keys, arrays, inline tables)");
  try {
    return toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    throw ConfigError(file, static_cast<int64_t>(e.source().begin.line), "",
                      "TOML syntax error: " + std::string(e.description()));
  }
}

TableReader::TableReader(const toml::table& table, std::string file, std::string prefix)
    : table_(&table), file_(std::move(file)), prefix_(std::move(prefix)) {}

std::string TableReader::path(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

int64_t TableReader::line_of(const std::string& key) const {
  if (const toml::node* n = node(key)) return static_cast<int64_t>(n->source().begin.line);
  return static_cast<int64_t>(table_->source().begin.line);
}

void TableReader::fail(const std::string& key, const std::string& message) const {
  throw ConfigError(file_, line_of(key), path(key), message);
}

const toml::node* TableReader::node(const std::string& key) const { return table_->get(key); }

bool TableReader::has(const std::string& key) const { return node(key) != nullptr; }

const toml::node& TableReader::require(const std::string& key) {
  used_.insert(key);
  const toml::node* n = node(key);
  if (!n) fail(key, "required key is missing");
  return *n;
}

std::string TableReader::string_of(const std::string& key, const toml::node& n, const char* expected) const {
  if (!n.is_string()) fail(key, std::string(expected) + ", got " + toml_type_name(n));
  const std::string& s = n.as_string()->get();
  if (s.find('\0') != std::string::npos) fail(key, "a string holds a NUL byte");
  return s;
}

std::string TableReader::require_string(const std::string& key) {
  return string_of(key, require(key), "expected a string");
}

int64_t TableReader::require_int(const std::string& key) {
  const auto& n = require(key);
  if (!n.is_integer()) fail(key, "expected an integer, got " + toml_type_name(n));
  return n.as_integer()->get();
}

namespace {
std::string range_problem(int64_t lo, int64_t hi, int64_t got) {
  return "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + std::to_string(got);
}
}  // namespace

int64_t TableReader::get_int_in(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
  const int64_t v = get_int(key, fallback);
  if (v < lo || v > hi) fail(key, range_problem(lo, hi, v));
  return v;
}

std::vector<int64_t> TableReader::get_int_array_in(const std::string& key, int64_t lo, int64_t hi,
                                                   std::size_t max_count) {
  used_.insert(key);
  std::vector<int64_t> out;
  const toml::node* n = node(key);
  if (!n) return out;
  if (!n->is_array()) fail(key, "expected an array of integers, got " + toml_type_name(*n));
  if (n->as_array()->size() > max_count) fail(key, "at most " + std::to_string(max_count) + " values");
  for (const auto& e : *n->as_array()) {
    if (!e.is_integer()) fail(key, "expected an array of integers, found a " + toml_type_name(e));
    const int64_t v = e.as_integer()->get();
    if (v < lo || v > hi) fail(key, range_problem(lo, hi, v));
    out.push_back(v);
  }
  return out;
}

double TableReader::require_number(const std::string& key) {
  const auto& n = require(key);
  if (n.is_integer()) return static_cast<double>(n.as_integer()->get());
  if (!n.is_floating_point()) fail(key, "expected a number, got " + toml_type_name(n));
  return n.as_floating_point()->get();
}

std::string TableReader::get_string(const std::string& key, const std::string& fallback) {
  return has(key) ? require_string(key) : (used_.insert(key), fallback);
}
int64_t TableReader::get_int(const std::string& key, int64_t fallback) {
  return has(key) ? require_int(key) : (used_.insert(key), fallback);
}
double TableReader::get_number(const std::string& key, double fallback) {
  return has(key) ? require_number(key) : (used_.insert(key), fallback);
}
bool TableReader::get_bool(const std::string& key, bool fallback) {
  used_.insert(key);
  const toml::node* n = node(key);
  if (!n) return fallback;
  if (!n->is_boolean()) fail(key, "expected a boolean, got " + toml_type_name(*n));
  return n->as_boolean()->get();
}

std::vector<std::string> TableReader::get_string_array(const std::string& key) {
  used_.insert(key);
  std::vector<std::string> out;
  const toml::node* n = node(key);
  if (!n) return out;
  if (!n->is_array()) fail(key, "expected an array of strings, got " + toml_type_name(*n));
  for (const auto& e : *n->as_array()) out.push_back(string_of(key, e, "expected an array of strings"));
  return out;
}

std::vector<std::string> TableReader::require_scalar_array(const std::string& key) {
  const auto& n = require(key);
  if (!n.is_array()) fail(key, "expected an array, got " + toml_type_name(n));
  std::vector<std::string> out;
  for (const auto& e : *n.as_array()) {
    if (e.is_string()) out.push_back(string_of(key, e, "expected strings or integers"));
    else if (e.is_integer()) out.push_back(std::to_string(e.as_integer()->get()));
    else fail(key, "expected strings or integers, found a " + toml_type_name(e));
  }
  return out;
}

std::vector<double> TableReader::get_number_array(const std::string& key) {
  used_.insert(key);
  std::vector<double> out;
  const toml::node* n = node(key);
  if (!n) return out;
  if (!n->is_array()) fail(key, "expected an array of numbers, got " + toml_type_name(*n));
  for (const auto& e : *n->as_array()) {
    if (e.is_integer()) out.push_back(static_cast<double>(e.as_integer()->get()));
    else if (e.is_floating_point()) out.push_back(e.as_floating_point()->get());
    else fail(key, "expected an array of numbers, found a " + toml_type_name(e));
  }
  return out;
}

TableReader TableReader::require_table(const std::string& key) {
  const auto& n = require(key);
  if (!n.is_table()) fail(key, "expected a table, got " + toml_type_name(n));
  return TableReader(*n.as_table(), file_, path(key));
}

std::optional<TableReader> TableReader::get_table(const std::string& key) {
  if (!has(key)) {
    used_.insert(key);
    return std::nullopt;
  }
  return require_table(key);
}

std::vector<TableReader> TableReader::require_table_array(const std::string& key) {
  const auto& n = require(key);
  const toml::array* array = n.as_array();
  if (!array) fail(key, "expected an array of tables, got " + toml_type_name(n));
  std::vector<TableReader> out;
  for (std::size_t i = 0; i < array->size(); ++i) {
    const auto& e = (*array)[i];
    if (!e.is_table()) fail(key, "expected an array of tables, found a " + toml_type_name(e));
    out.emplace_back(*e.as_table(), file_, path(key) + "[" + std::to_string(i) + "]");
  }
  return out;
}

std::vector<std::string> TableReader::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : *table_) out.emplace_back(k.str());
  return out;
}

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

void TableReader::finish() const {
  for (const auto& [k, v] : *table_) {
    std::string key(k.str());
    if (used_.count(key)) continue;
    // The keys this table was asked for are the ones it knows: the nearest one is the likely intended key.
    std::string nearest;
    std::size_t best = std::max<std::size_t>(2, key.size() / 3) + 1;
    // A key far longer than any known one is no typo of one (and would cost its length times each key to compare).
    if (key.size() <= 64)
      for (const auto& known : used_)
        if (const auto d = edit_distance(key, known); d < best) best = d, nearest = known;
    throw ConfigError(file_, static_cast<int64_t>(v.source().begin.line), path(key),
                      nearest.empty() ? "unknown key" : "unknown key (did you mean '" + nearest + "'?)");
  }
}

}  // namespace crucible::config
