#pragma once
// A report as a file: one self-contained HTML page (inline SVG and CSS, no scripts, nothing fetched), Markdown or
// CSV with the same tables, or JSON.
#include <string>

#include "report/report.h"

namespace crucible::report {

enum class Format { html, md, csv, json };

Format parse_format(const std::string& name);  // throws std::invalid_argument naming the choices
std::string render(const Report& report, Format format);

// The HTML page alone (render(report, Format::html)).
std::string render_html(const Report& report);

// A number as the tables print it: integers without decimals, others with 4 significant digits.
std::string format_number(double value);

}  // namespace crucible::report
