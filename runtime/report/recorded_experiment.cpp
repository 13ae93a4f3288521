#include "report/recorded_experiment.h"

#include "config/toml_edit.h"
#include "config/toml_reader.h"
#include "run/recorded_file.h"

namespace crucible::report {
namespace {

constexpr std::size_t kMaxExperimentBytes = std::size_t{1} << 20;

}  // namespace

experiment::Experiment read_recorded_experiment(const std::filesystem::path& run_dir) {
  const auto path = run_dir / "experiment.toml";
  const std::string text = run::read_regular_file(path, kMaxExperimentBytes, /*follow_link=*/false);
  // tasks.dir is read as "." (a directory wherever the text is read): a report needs only what the run recorded.
  auto e = experiment::parse_experiment(config::with_string_value(text, path.string(), "tasks.dir", "."), path.string());
  // As the run wrote them; a relative tasks.dir was relative to where the run was started, not to here.
  e.tasks.dir = config::parse_toml_text(text, path.string()).at_path("tasks.dir").value_or(std::string());
  e.text = text;
  return e;
}

}  // namespace crucible::report
