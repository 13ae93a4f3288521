// What evaluators may hand each other about a task: a fingerprint of the task's content that ignores where its file
// lies, and a plausibility check on timings that arrive from another node.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "crucible/eval/shared_timing.h"
#include "tasks/task_loader.h"

using namespace crucible::eval;
namespace fs = std::filesystem;

TEST_CASE("a task's fingerprint follows its content, not its path or its prompt text") {
  const TaskSpec relu = crucible::tasks::load_task_file(fs::path(CRUCIBLE_SOURCE_DIR) / "configs/tasks/relu.toml");
  const std::string base = task_fingerprint(relu);
  CHECK(base.size() == 64);
  CHECK(task_fingerprint(relu) == base);

  struct Row {
    const char* change;
    std::function<void(TaskSpec&)> apply;
    bool same;
  };
  const std::vector<Row> rows = {
      {"another path", [](TaskSpec& t) { t.source_path = "/elsewhere/relu.toml"; }, true},
      {"another description", [](TaskSpec& t) { t.description = "other words"; }, true},
      {"another prompt snippet", [](TaskSpec& t) { t.reference_source = "x.relu()"; }, true},
      {"another name", [](TaskSpec& t) { t.name = "relu2"; }, false},
      {"another GPU size", [](TaskSpec& t) { t.sizes["cuda"].begin()->second += 1; }, false},
      {"another input dtype", [](TaskSpec& t) { t.inputs[0].dtype = DType::float16; }, false},
      {"another input distribution", [](TaskSpec& t) { t.inputs[0].init.std = 2.0; }, false},
      {"another tolerance", [](TaskSpec& t) { t.tolerance[DType::float32].atol = 1.0; }, false},
      {"another reference", [](TaskSpec& t) { t.reference = "gelu"; }, false},
      {"a parameter", [](TaskSpec& t) { t.params["eps"] = 1e-5; }, false},
      {"a shape case", [](TaskSpec& t) { t.shape_cases["cuda"].push_back({"s1", {{"N", 8}}, {}}); }, false},
  };
  for (const auto& row : rows) {
    CAPTURE(row.change);
    TaskSpec t = relu;
    row.apply(t);
    CHECK((task_fingerprint(t) == base) == row.same);
  }
}

TEST_CASE("a TorchScript reference enters the fingerprint by its bytes, wherever the file lies") {
  const fs::path dir = fs::temp_directory_path() / ("crucible-fp-" + std::to_string(std::random_device{}()));
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  auto write = [](const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; };
  write(dir / "a/ref.pt", "program one");
  write(dir / "b/ref.pt", "program one");
  TaskSpec t;
  t.name = "kb_1";
  t.reference = "torchscript";
  t.reference_files["cuda"] = (dir / "a/ref.pt").string();
  const std::string at_a = task_fingerprint(t);
  t.reference_files["cuda"] = (dir / "b/ref.pt").string();
  CHECK(task_fingerprint(t) == at_a);
  write(dir / "b/ref.pt", "program two");
  CHECK(task_fingerprint(t) != at_a);
  t.reference_files["cuda"] = (dir / "missing.pt").string();  // unreadable: matches no readable one
  CHECK(task_fingerprint(t) != at_a);
  fs::remove_all(dir);
}

TEST_CASE("timings from another evaluator are used only if they could be a measurement") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const SharedTiming good{"relu", "relu|k", TimingStats{5, 20.0, 20.5, 19.0, 23.0, 0.01}, RefreshChoice::whole};
  struct Row {
    const char* what;
    std::function<void(SharedTiming&)> apply;
    bool usable;
  };
  const std::vector<Row> rows = {
      {"as measured", [](SharedTiming&) {}, true},
      {"refresh unknown", [](SharedTiming& t) { t.refresh = RefreshChoice::unknown; }, true},
      {"no key", [](SharedTiming& t) { t.key.clear(); }, false},
      {"a key as long as allowed", [](SharedTiming& t) { t.key.assign(kMaxSharedKeyBytes, 'k'); }, true},
      {"a key longer than any evaluator makes", [](SharedTiming& t) { t.key.assign(kMaxSharedKeyBytes + 1, 'k'); }, false},
      {"no task", [](SharedTiming& t) { t.task.clear(); }, false},
      {"no trials", [](SharedTiming& t) { t.reference.trials = 0; }, false},
      {"zero median", [](SharedTiming& t) { t.reference.median_us = 0.0; }, false},
      {"negative min", [](SharedTiming& t) { t.reference.min_us = -1.0; }, false},
      {"infinite max", [inf](SharedTiming& t) { t.reference.max_us = inf; }, false},
      {"NaN mean", [nan](SharedTiming& t) { t.reference.mean_us = nan; }, false},
      {"median below min", [](SharedTiming& t) { t.reference.median_us = 18.0; }, false},
      {"median above max", [](SharedTiming& t) { t.reference.median_us = 24.0; }, false},
      {"negative spread", [](SharedTiming& t) { t.reference.cv = -0.1; }, false},
      {"NaN spread", [nan](SharedTiming& t) { t.reference.cv = nan; }, false},
  };
  for (const auto& row : rows) {
    CAPTURE(row.what);
    SharedTiming t = good;
    row.apply(t);
    CHECK(plausible(t) == row.usable);
  }
  CHECK(shared_task_name("trimul@n256_b2") == "trimul");
  CHECK(shared_task_name("relu") == "relu");
}
