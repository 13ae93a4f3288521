// The HTML page: tables, line charts with a band across seeds, the stage timeline and the per-task scatter, all as
// inline SVG; the best kernels' sources in collapsible blocks. Every text from a run (task names, sources, labels)
// is escaped: a candidate's source is untrusted.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "report/render.h"

namespace crucible::report {
namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += (ch < 0x20 && ch != '\n' && ch != '\t') ? ' ' : static_cast<char>(ch);
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string cell_html(const Cell& c) {
  if (std::holds_alternative<double>(c)) return format_number(std::get<double>(c));
  if (std::holds_alternative<std::string>(c)) return escape(std::get<std::string>(c));
  return "";
}

void table_html(std::ostringstream& out, const Table& t) {
  out << "<h2 id=\"" << escape(t.id) << "\">" << escape(t.title) << "</h2>\n";
  if (!t.note.empty()) out << "<p class=\"note\">" << escape(t.note) << "</p>\n";
  out << "<table data-table=\"" << escape(t.id) << "\"><thead><tr>";
  for (const auto& c : t.columns) out << "<th>" << escape(c) << "</th>";
  out << "</tr></thead><tbody>\n";
  for (const auto& row : t.rows) {
    out << "<tr>";
    for (const auto& c : row) out << (std::holds_alternative<double>(c) ? "<td class=\"n\">" : "<td>") << cell_html(c) << "</td>";
    out << "</tr>\n";
  }
  out << "</tbody></table>\n";
}

constexpr double kW = 640, kH = 260, kL = 56, kR = 12, kT = 14, kB = 34;

void chart_svg(std::ostringstream& out, const Chart& c) {
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& s : c.series)
    for (std::size_t i = 0; i < s.steps.size(); ++i) {
      x0 = std::min<double>(x0, s.steps[i]);
      x1 = std::max<double>(x1, s.steps[i]);
      y0 = std::min(y0, s.points[i].low);
      y1 = std::max(y1, s.points[i].high);
    }
  if (x0 > x1) return;
  if (x1 == x0) x1 = x0 + 1;
  y0 = std::min(0.0, y0);
  if (y1 <= y0) y1 = y0 + 1;
  auto X = [&](double x) { return kL + (x - x0) / (x1 - x0) * (kW - kL - kR); };
  auto Y = [&](double y) { return kT + (1 - (y - y0) / (y1 - y0)) * (kH - kT - kB); };
  out << "<h3>" << escape(c.title) << "</h3>\n<svg class=\"chart\" data-chart=\"" << escape(c.id)
      << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH << "\" viewBox=\"0 0 " << kW
      << " " << kH << "\">\n";
  out << "<rect x=\"" << kL << "\" y=\"" << kT << "\" width=\"" << kW - kL - kR << "\" height=\"" << kH - kT - kB
      << "\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n";
  for (int k = 0; k <= 4; ++k) {
    const double y = y0 + (y1 - y0) * k / 4;
    out << "<text x=\"" << kL - 4 << "\" y=\"" << num(Y(y) + 4) << "\" text-anchor=\"end\" font-size=\"11\">"
        << format_number(std::round(y * 1000) / 1000) << "</text>\n";
  }
  out << "<text x=\"" << kL << "\" y=\"" << kH - 8 << "\" font-size=\"11\">step " << format_number(x0) << "</text>"
      << "<text x=\"" << kW - kR << "\" y=\"" << kH - 8 << "\" text-anchor=\"end\" font-size=\"11\">step "
      << format_number(x1) << "</text>\n";
  for (std::size_t si = 0; si < c.series.size(); ++si) {
    const auto& s = c.series[si];
    const char* color = kColors[si % 8];
    std::string band = "", line = "";
    for (std::size_t i = 0; i < s.steps.size(); ++i) band += num(X(s.steps[i])) + "," + num(Y(s.points[i].high)) + " ";
    for (std::size_t i = s.steps.size(); i-- > 0;) band += num(X(s.steps[i])) + "," + num(Y(s.points[i].low)) + " ";
    for (std::size_t i = 0; i < s.steps.size(); ++i) line += num(X(s.steps[i])) + "," + num(Y(s.points[i].mean)) + " ";
    out << "<polygon points=\"" << band << "\" fill=\"" << color << "\" fill-opacity=\"0.18\" stroke=\"none\"/>\n";
    out << "<polyline points=\"" << line << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\"/>\n";
    if (s.steps.size() == 1)
      out << "<circle cx=\"" << num(X(s.steps[0])) << "\" cy=\"" << num(Y(s.points[0].mean)) << "\" r=\"4\" fill=\""
          << color << "\"/>\n";
  }
  out << "</svg>\n<p class=\"legend\">";
  for (std::size_t si = 0; si < c.series.size(); ++si)
    out << "<span style=\"color:" << kColors[si % 8] << "\">&#9632;</span> " << escape(c.series[si].label) << " ";
  out << "</p>\n";
}

void timeline_svg(std::ostringstream& out, const Timeline& t) {
  const double lane_h = 18, width = 900, left = 190;
  const double height = lane_h * t.lanes.size() + 30;
  const char* stage_colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"};
  out << "<h3>Stage timeline: " << escape(t.run) << ", seed " << t.seed << " (" << format_number(t.seconds)
      << " s)</h3>\n<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\""
      << height << "\">\n";
  for (std::size_t l = 0; l < t.lanes.size(); ++l)
    out << "<text x=\"" << left - 6 << "\" y=\"" << num(l * lane_h + 13) << "\" text-anchor=\"end\" font-size=\"11\">"
        << escape(t.lanes[l]) << "</text>\n";
  const double scale = (width - left - 10) / std::max(1e-9, t.seconds);
  for (const auto& b : t.bars)
    out << "<rect x=\"" << num(left + b.start * scale) << "\" y=\"" << num(b.lane * lane_h + 2) << "\" width=\""
        << num(std::max(0.5, (b.end - b.start) * scale)) << "\" height=\"" << lane_h - 4 << "\" fill=\""
        << stage_colors[static_cast<int>(b.stage)] << "\" fill-opacity=\"0.6\"/>\n";
  out << "<text x=\"" << left << "\" y=\"" << height - 6 << "\" font-size=\"11\">0 s</text><text x=\"" << width - 10
      << "\" y=\"" << height - 6 << "\" text-anchor=\"end\" font-size=\"11\">" << format_number(t.seconds)
      << " s</text>\n</svg>\n";
  if (t.candidates_left_out)
    out << "<p class=\"note\">" << t.candidates_left_out << " later candidates are not drawn.</p>\n";
}

void scatter_svg(std::ostringstream& out, const Scatter& s) {
  if (s.points.empty()) return;
  double lo = 1e300, hi = 0;
  for (const auto& p : s.points) lo = std::min({lo, p.x, p.y}), hi = std::max({hi, p.x, p.y});
  lo = std::log10(lo) - 0.1;
  hi = std::log10(hi) + 0.1;
  const double size = 360, pad = 40;
  auto P = [&](double v) { return pad + (std::log10(v) - lo) / (hi - lo) * (size - 2 * pad); };
  out << "<h3>Per task: best speedup, " << escape(s.x_label) << " (x) against " << escape(s.y_label)
      << " (y), log scale</h3>\n<svg class=\"scatter\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << size
      << "\" height=\"" << size << "\">\n<rect x=\"" << pad << "\" y=\"" << pad << "\" width=\"" << size - 2 * pad
      << "\" height=\"" << size - 2 * pad << "\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n<line x1=\"" << pad << "\" y1=\""
      << size - pad << "\" x2=\"" << size - pad << "\" y2=\"" << pad << "\" stroke=\"#999\" stroke-dasharray=\"4\"/>\n";
  for (const auto& p : s.points)
    out << "<circle cx=\"" << num(P(p.x)) << "\" cy=\"" << num(size - P(p.y)) << "\" r=\"4\" fill=\"#1f77b4\"><title>"
        << escape(p.task) << ": " << format_number(p.x) << " / " << format_number(p.y) << "</title></circle>\n";
  out << "</svg>\n";
}

}  // namespace

std::string render_html(const Report& r) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Crucible report</title>\n<style>"
         "body{font-family:sans-serif;margin:24px;max-width:1100px}table{border-collapse:collapse;margin:8px 0 20px}"
         "th,td{border:1px solid #ddd;padding:3px 8px;font-size:13px}td.n{text-align:right}th{background:#f3f3f3}"
         ".warning{background:#fff3cd;padding:8px;border:1px solid #e0c060}.note{color:#666;font-size:12px}"
         "pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px}"
         "</style></head><body>\n<h1>Crucible report</h1>\n<ul>";
  for (const auto& run : r.runs) out << "<li>" << escape(run) << "</li>";
  out << "</ul>\n";
  for (const auto& w : r.warnings) out << "<p class=\"warning\">" << escape(w) << "</p>\n";
  for (const auto& c : r.charts) chart_svg(out, c);
  if (r.scatter) scatter_svg(out, *r.scatter);
  for (const auto& t : r.tables) table_html(out, t);
  out << "<h2>Best kernels</h2>\n";
  for (const auto& b : r.best) {
    out << "<details><summary>" << escape(b.run) << ": " << escape(b.task) << ", "
        << escape(std::string(eval::status_name(b.candidate.status)));
    if (b.candidate.speedup) out << ", speedup " << format_number(*b.candidate.speedup);
    out << " (candidate " << b.candidate.id << ", seed " << b.seed << ", <a href=\"file://" << escape(b.record.string())
        << "\">record</a>)</summary>\n<pre>" << escape(b.source.empty() ? "(no source kept)" : b.source)
        << "</pre></details>\n";
  }
  for (const auto& t : r.timelines) timeline_svg(out, t);
  out << "<p class=\"note\">Timeline colours: generation blue, compilation orange, evaluation green, training red."
         "</p>\n</body></html>\n";
  return out.str();
}

}  // namespace crucible::report
