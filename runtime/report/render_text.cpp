#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "report/render.h"

namespace crucible::report {

namespace {

std::string cell_text(const Cell& c) {
  if (std::holds_alternative<double>(c)) return format_number(std::get<double>(c));
  if (std::holds_alternative<std::string>(c)) return std::get<std::string>(c);
  return "";
}

// Names come from experiment files and records: in Markdown they stay text. Markup characters are escaped, and
// HTML (which Markdown renderers pass through) becomes entities.
std::string markdown_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '&') out += "&amp;";
    else if (ch == '\n' || ch == '\r') out += ' ';
    else if (ch == '|' || ch == '\\' || ch == '`' || ch == '[' || ch == ']' || ch == '*') out += std::string("\\") + ch;
    else out += ch;
  }
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

// A text cell that a spreadsheet would run as a formula (OWASP's CSV injection: a leading =, +, -, @, tab or
// carriage return) is kept as text by a leading quote. Numbers are written by us and stay numbers.
std::string csv_cell(const Cell& c) {
  if (!std::holds_alternative<std::string>(c)) return csv_field(cell_text(c));
  const std::string& text = std::get<std::string>(c);
  const bool formula = !text.empty() && std::string("=+-@\t\r").find(text.front()) != std::string::npos;
  return csv_field(formula ? "'" + text : text);
}

std::string render_markdown(const Report& r) {
  std::ostringstream out;
  out << "# Crucible report\n\n";
  for (const auto& run : r.runs) out << "- " << markdown_escape(run) << "\n";
  out << "\n";
  for (const auto& w : r.warnings) out << "> **Warning:** " << markdown_escape(w) << "\n\n";
  for (const auto& t : r.tables) {
    out << "## " << markdown_escape(t.title) << "\n\n";
    if (!t.note.empty()) out << markdown_escape(t.note) << "\n\n";
    out << "|";
    for (const auto& c : t.columns) out << " " << markdown_escape(c) << " |";
    out << "\n|";
    for (std::size_t i = 0; i < t.columns.size(); ++i) out << " --- |";
    out << "\n";
    for (const auto& row : t.rows) {
      out << "|";
      for (const auto& c : row) out << " " << markdown_escape(cell_text(c)) << " |";
      out << "\n";
    }
    out << "\n";
  }
  return out.str();
}

// One CSV for all tables: the first column names the table, each table starts with its header row.
std::string render_csv(const Report& r) {
  std::ostringstream out;
  for (const auto& t : r.tables) {
    out << "table";
    for (const auto& c : t.columns) out << "," << csv_field(c);
    out << "\n";
    for (const auto& row : t.rows) {
      out << t.id;
      for (const auto& c : row) out << "," << csv_cell(c);
      out << "\n";
    }
  }
  return out.str();
}

std::string render_json(const Report& r) {
  using nlohmann::json;
  json j{{"runs", r.runs}, {"warnings", r.warnings}, {"tables", json::object()}, {"charts", json::array()}};
  for (const auto& t : r.tables) {
    json rows = json::array();
    for (const auto& row : t.rows) {
      json o = json::object();
      for (std::size_t i = 0; i < row.size() && i < t.columns.size(); ++i) {
        const auto& c = row[i];
        o[t.columns[i]] = std::holds_alternative<double>(c)        ? json(std::get<double>(c))
                          : std::holds_alternative<std::string>(c) ? json(std::get<std::string>(c))
                                                                    : json(nullptr);
      }
      rows.push_back(std::move(o));
    }
    j["tables"][t.id] = {{"title", t.title}, {"rows", std::move(rows)}};
  }
  for (const auto& c : r.charts) {
    json series = json::array();
    for (const auto& s : c.series) {
      json points = json::array();
      for (std::size_t i = 0; i < s.steps.size(); ++i)
        points.push_back({{"step", s.steps[i]}, {"mean", s.points[i].mean}, {"low", s.points[i].low},
                          {"high", s.points[i].high}, {"seeds", s.points[i].n}});
      series.push_back({{"run", s.label}, {"points", std::move(points)}});
    }
    j["charts"].push_back({{"id", c.id}, {"title", c.title}, {"series", std::move(series)}});
  }
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";  // names need not be UTF-8
}

}  // namespace

std::string format_number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[64];
  if (v == std::floor(v) && std::abs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

Format parse_format(const std::string& name) {
  if (name == "html") return Format::html;
  if (name == "md") return Format::md;
  if (name == "csv") return Format::csv;
  if (name == "json") return Format::json;
  throw std::invalid_argument("unknown format '" + name + "' (html, md, csv, json)");
}

std::string render(const Report& report, Format format) {
  switch (format) {
    case Format::html: return render_html(report);
    case Format::md: return render_markdown(report);
    case Format::csv: return render_csv(report);
    case Format::json: return render_json(report);
  }
  return "";
}

}  // namespace crucible::report
