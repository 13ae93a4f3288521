#include "report/recorded_experiment.h"

#include "config/toml_reader.h"
#include "run/recorded_file.h"

namespace crucible::report {
namespace {

constexpr std::size_t kMaxExperimentBytes = std::size_t{1} << 20;

// The byte offset of a TOML source position (1-based line, 1-based column counted in UTF-8 characters).
std::size_t offset_of(const std::string& text, const toml::source_position& at) {
  std::size_t i = 0;
  for (toml::source_index line = 1; line < at.line && i < text.size(); ++i)
    if (text[i] == '\n') ++line;
  for (toml::source_index column = 1; column < at.column && i < text.size();) {
    ++i;
    while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;  // continuation bytes
    ++column;
  }
  return i;
}

// The text with tasks.dir's value replaced by "." (a directory wherever the text is read), keeping every line
// where it was so that errors about other keys name the lines of the file.
std::string without_tasks_dir(const std::string& text, const std::string& file) {
  const toml::table table = config::parse_toml_text(text, file);
  const auto dir = table.at_path("tasks.dir");
  if (!dir || !dir.is_string()) return text;
  const auto& region = dir.node()->source();
  const std::size_t begin = offset_of(text, region.begin), end = offset_of(text, region.end);
  const std::string lines_kept(region.end.line - region.begin.line, '\n');
  return text.substr(0, begin) + "\".\"" + lines_kept + text.substr(end);
}

}  // namespace

experiment::Experiment read_recorded_experiment(const std::filesystem::path& run_dir) {
  const auto path = run_dir / "experiment.toml";
  const std::string text = run::read_regular_file(path, kMaxExperimentBytes, /*follow_link=*/false);
  auto e = experiment::parse_experiment(without_tasks_dir(text, path.string()), path.string());
  // As the run wrote them; a relative tasks.dir was relative to where the run was started, not to here.
  e.tasks.dir = config::parse_toml_text(text, path.string()).at_path("tasks.dir").value_or(std::string());
  e.text = text;
  return e;
}

}  // namespace crucible::report
