// A device parsed once from its text, by one parser.
#include <doctest/doctest.h>

#include "crucible/eval/device.h"
#include "crucible/eval/eval_settings.h"

using namespace crucible::eval;

TEST_CASE("devices parse from their names and print back the same") {
  struct Row {
    const char* text;
    bool bare_cuda;
    bool ok;
    Device device;
  };
  const Row rows[] = {
      {"cpu", false, true, Device::cpu()},
      {"cuda:0", false, true, Device::cuda(0)},
      {"cuda:12", false, true, Device::cuda(12)},
      {"cuda", true, true, Device::cuda(0)},  // the eval CLI's shorthand
      {"cuda", false, false, {}},
      {"cuda:", false, false, {}},
      {"cuda:-1", false, false, {}},
      {"cuda:1x", false, false, {}},
      {"cuda:99999999", false, false, {}},
      {"gpu:0", false, false, {}},
      {"CPU", false, false, {}},
      {"", false, false, {}},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    if (row.ok) {
      const Device d = parse_device(row.text, row.bare_cuda);
      CHECK(d == row.device);
      if (std::string(row.text) != "cuda") CHECK(d.name() == row.text);
    } else {
      CHECK_THROWS_AS(parse_device(row.text, row.bare_cuda), std::invalid_argument);
    }
  }
}

TEST_CASE("backends and evaluation modes parse strictly") {
  CHECK(parse_backend("cpu") == Backend::cpu);
  CHECK(parse_backend("cuda") == Backend::cuda);
  CHECK_THROWS_AS(parse_backend("gpu"), std::invalid_argument);
  CHECK(source_extension(Backend::cuda) == "cu");
  CHECK(parse_eval_depth("full") == EvalDepth::full);
  CHECK_THROWS_AS(parse_eval_depth("Full"), std::invalid_argument);
  for (Launches l : {Launches::eager, Launches::queued}) CHECK(parse_launches(launches_name(l)) == l);
  CHECK_THROWS_AS(parse_launches("held"), std::invalid_argument);
  RunEvalSettings s;
  CHECK(s.launches == Launches::eager);
  CHECK(s.size_set() == "cpu");
  s.backend = Backend::cuda;
  CHECK(s.size_set() == "cuda");
  s.sizes = "cpu";
  CHECK(s.size_set() == "cpu");
}

TEST_CASE("each candidate kind has one name, one file extension and one language, from one table") {
  struct Row {
    Backend backend;
    CandidateKind kind;
    const char* name;
    const char* extension;
    const char* language;
  };
  const Row rows[] = {
      {Backend::cpu, CandidateKind::native, "native", "cpp", "cpu"},
      {Backend::cuda, CandidateKind::native, "native", "cu", "cuda"},
      {Backend::cuda, CandidateKind::triton, "triton", "py", "triton"},
      {Backend::cpu, CandidateKind::kernelbench, "kernelbench", "py", "kernelbench"},
  };
  for (const auto& row : rows) {
    INFO(row.name, " on ", backend_name(row.backend));
    CHECK(candidate_kind_name(row.kind) == row.name);
    CHECK(parse_candidate_kind(row.name) == row.kind);
    CHECK(source_extension(row.backend, row.kind) == row.extension);
    CHECK(candidate_language(row.backend, row.kind) == row.language);
    RunEvalSettings s;
    s.backend = row.backend;
    s.kind = row.kind;
    CHECK(s.language() == row.language);
  }
  CHECK_THROWS_AS(parse_candidate_kind("python"), std::invalid_argument);
}

TEST_CASE("one evaluation's options are the run's settings on a device, with nothing copied by hand") {
  RunEvalSettings run;
  run.backend = Backend::cuda;
  run.kind = CandidateKind::triton;
  run.mode = EvalDepth::full;
  run.launches = Launches::queued;
  run.sizes = "cpu";
  run.correctness_trials = 7;
  run.timing_trials = 9;
  run.call_timeout_s = 4.5;
  run.evaluation_budget_s = 60.0;
  run.forbid_torch_ops = true;
  const EvalOptions o = options_for(run, Device::cuda(2));
  CHECK(o.device == Device::cuda(2));
  CHECK(o.kind == CandidateKind::triton);
  CHECK(o.mode == EvalDepth::full);
  CHECK(o.launches == Launches::queued);
  CHECK(o.sizes == "cpu");
  CHECK(o.correctness_trials == 7);
  CHECK(o.timing_trials == 9);
  CHECK(o.call_timeout_s == 4.5);
  CHECK(o.evaluation_budget_s == 60.0);
  CHECK(o.forbid_torch_ops);
  CHECK(o.warmup_calls == -1);  // what only one evaluation sets keeps its default
}
