// `crucible report RUN... [--out FILE] [--format html|md|csv|json]`: one run's report, or two or more compared at
// equal budget (runtime/report/). HTML by default, written beside the run (or ./crucible-report.html for several);
// `--out -` prints to standard output. The format follows --out's extension when --format is not given.
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/terminal_text.h"
#include "report/render.h"

namespace crucible::cli {
namespace {
namespace fs = std::filesystem;

struct ReportArgs {
  std::vector<std::string> runs;
  std::string out, format;
};

int report(const ReportArgs& a) {
  try {
    report::Format format = report::Format::html;
    if (!a.format.empty()) format = report::parse_format(a.format);
    else if (!a.out.empty() && a.out != "-" && fs::path(a.out).has_extension())
      format = report::parse_format(fs::path(a.out).extension().string().substr(1));
    const char* ext = format == report::Format::html ? "html"
                      : format == report::Format::md ? "md"
                      : format == report::Format::csv ? "csv"
                                                      : "json";
    std::vector<report::RunRecord> runs;
    for (const auto& dir : a.runs) runs.push_back(report::load_run(dir));
    const auto built = report::build_report(runs);
    // Also on stderr: what a report left out must not pass unseen when the file is read later or not at all.
    for (const auto& w : built.warnings) std::cerr << "warning: " << printable(w) << "\n";
    const std::string text = report::render(built, format);
    if (a.out == "-") {
      std::cout << text;
      return 0;
    }
    const fs::path out = !a.out.empty()       ? fs::path(a.out)
                         : runs.size() == 1 ? runs.front().dir / (std::string("report.") + ext)
                                            : fs::path(std::string("crucible-report.") + ext);
    std::ofstream file(out, std::ios::binary);
    if (!(file << text) || !file.flush()) throw std::invalid_argument("cannot write " + out.string());
    std::cout << "report: " << out.string() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace

Run add_report_command(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand("report", "A run's curves, verdicts, best kernels and budget; several runs compared");
  cmd->add_option("runs", args->runs, "Run directories (two or more: compared)")->required();
  cmd->add_option("--out", args->out, "File to write ('-': standard output); default RUN/report.<format>");
  cmd->add_option("--format", args->format, "html, md, csv or json (default: from --out's extension, else html)")
      ->check(CLI::IsMember({"html", "md", "csv", "json"}));
  return [cmd, args]() -> int { return cmd->parsed() ? report(*args) : -1; };
}

}  // namespace crucible::cli
