// `crucible tasks import --kernelbench` end to end: problem files in KernelBench's format become tasks whose
// TorchScript references judge candidates written from the prompt alone, parameters included as inputs. Needs
// Debian's python3-torch (installed by tools/setup.sh); without it each case says so and passes nothing.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>
#include <string>

#include "cli_support.h"
#include "support.h"

using namespace crucible;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool python_has_torch() {
  eval::ProcessLimits limits;
  limits.wall_seconds = 60;
  return eval::run_process({"/usr/bin/python3", "-c", "import torch"}, limits).ok();
}

// Problems written as KernelBench writes them: module-level sizes, Model, get_inputs, get_init_inputs.
void write_problems(const fs::path& level1, const fs::path& level2) {
  fs::create_directories(level1);
  fs::create_directories(level2);
  test::write_file(level1 / "1_ReLU.py", R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

batch_size = 16
dim = 16384

def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]

def get_init_inputs():
    return []
)");
  test::write_file(level1 / "2_Sum_over_a_dimension.py", R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)

batch_size = 16
dim1 = 256
dim2 = 256
reduce_dim = 1

def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]

def get_init_inputs():
    return [reduce_dim]
)");
  test::write_file(level2 / "3_Gemm_ReLU.py", R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))

batch_size = 128
in_features = 512
out_features = 256

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
)");
  test::write_file(level1 / "5_Conv2d.py", R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return self.conv(x)

batch_size = 2
in_channels = 3
out_channels = 8
kernel_size = 3
height = 32
width = 32

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
)");
  test::write_file(level2 / "4_Dropout.py", R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, p):
        super(Model, self).__init__()
        self.dropout = nn.Dropout(p)

    def forward(self, x):
        return self.dropout(x) * 2.0

batch_size = 64
dim = 1024

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return [0.5]
)");
}

// A naive candidate for each imported problem, written from the tasks alone: inputs in order, parameters after.
const char* kRelu = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* x = static_cast<const float*>(in[0].data);
  float* y = static_cast<float*>(out[0].data);
  int64_t n = 1;
  for (int32_t d = 0; d < in[0].ndim; ++d) n *= in[0].shape[d];
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  return 0;
}
)";

const char* kSumDim1 = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* x = static_cast<const float*>(in[0].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t b = in[0].shape[0], r = in[0].shape[1], c = in[0].shape[2];
  for (int64_t i = 0; i < b; ++i)
    for (int64_t k = 0; k < c; ++k) {
      float s = 0.0f;
      for (int64_t j = 0; j < r; ++j) s += x[(i * r + j) * c + k];
      y[i * c + k] = s;
    }
  return 0;
}
)";

// out = epilogue(x @ weight^T + bias) for a Linear: its weight [out, in] and bias [out] come after x. The epilogue
// is a C++ statement on the float `s`.
std::string gemm_candidate(const std::string& epilogue) {
  return R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t n_in, crucible_tensor* out, int32_t, void*) {
  if (n_in != 3) return 1;
  const float* x = static_cast<const float*>(in[0].data);
  const float* w = static_cast<const float*>(in[1].data);
  const float* bias = static_cast<const float*>(in[2].data);
  float* y = static_cast<float*>(out[0].data);
  const int64_t b = in[0].shape[0], k = in[0].shape[1], n = in[1].shape[0];
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float s = bias[j];
      for (int64_t t = 0; t < k; ++t) s += x[i * k + t] * w[j * k + t];
      )" + epilogue + R"(
      y[i * n + j] = s;
    }
  return 0;
}
)";
}

// level2/3 (written here): relu. level2/12: LeakyReLU(0.1) of the product times 2.0, constants from the source.
const std::string kGemmRelu = gemm_candidate("s = s > 0.0f ? s : 0.0f;");
const std::string kGemmMultiplyLeakyRelu = gemm_candidate("s *= 2.0f; s = s > 0.0f ? s : 0.1f * s;");

// A direct convolution (stride 1, no padding): the Conv2d's weight [O, C, K, K] and its bias [O], if it has one,
// come after x.
const char* kConv2d = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t n_in, crucible_tensor* out, int32_t, void*) {
  if (n_in != 2 && n_in != 3) return 1;
  const float* x = static_cast<const float*>(in[0].data);
  const float* w = static_cast<const float*>(in[1].data);
  const float* bias = n_in == 3 ? static_cast<const float*>(in[2].data) : nullptr;
  float* y = static_cast<float*>(out[0].data);
  const int64_t b = in[0].shape[0], c = in[0].shape[1], h = in[0].shape[2], wd = in[0].shape[3];
  const int64_t o = in[1].shape[0], k = in[1].shape[2];
  const int64_t oh = h - k + 1, ow = wd - k + 1;
  for (int64_t n = 0; n < b; ++n)
    for (int64_t f = 0; f < o; ++f)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          float s = bias ? bias[f] : 0.0f;
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t di = 0; di < k; ++di)
              for (int64_t dj = 0; dj < k; ++dj)
                s += x[((n * c + ch) * h + i + di) * wd + j + dj] * w[((f * c + ch) * k + di) * k + dj];
          y[((n * o + f) * oh + i) * ow + j] = s;
        }
  return 0;
}
)";

// level1/14: triu(A @ B), summing only where both factors can be non-zero: correct only if the evaluator's inputs
// really are upper triangular, as the problem's get_inputs makes them.
const char* kTriuMatmul = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* a = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* c = static_cast<float*>(out[0].data);
  const int64_t n = in[0].shape[0];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int64_t k = i; k <= j; ++k) s += a[i * n + k] * b[k * n + j];
      c[i * n + j] = s;
    }
  return 0;
}
)";

// level1/13: A @ B for symmetric A, read as A^T @ B (columns of A as rows): correct only for symmetric inputs.
const char* kSymmetricMatmul = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* a = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  float* c = static_cast<float*>(out[0].data);
  const int64_t n = in[0].shape[0];
  for (int64_t i = 0; i < n * n; ++i) c[i] = 0.0f;
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[k * n + i] * b[k * n + j];
  return 0;
}
)";

// level1/100: mean(clamp(1 - predictions * targets, min=0)); targets [B] broadcast along the last axis of
// predictions [B, D] (the problem has B == D), so element (i, j) pairs with targets[j]. Written for targets of
// exactly +1 or -1, as get_inputs draws them. Its output concentrates near 1, so the task asks for more trials.
const char* kHingeLoss = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {
  const float* p = static_cast<const float*>(in[0].data);
  const float* t = static_cast<const float*>(in[1].data);
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  double sum = 0.0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const float h = t[j] > 0.0f ? 1.0f - p[i * cols + j] : 1.0f + p[i * cols + j];
      sum += h > 0.0f ? h : 0.0f;
    }
  static_cast<float*>(out[0].data)[0] = static_cast<float>(sum / static_cast<double>(rows * cols));
  return 0;
}
)";

const char* kOne = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor*, int32_t, crucible_tensor* out, int32_t, void*) {
  static_cast<float*>(out[0].data)[0] = 1.0f;
  return 0;
}
)";

const char* kZeros = R"(#include <crucible/kernel.h>
CRUCIBLE_API int crucible_forward(const crucible_tensor*, int32_t, crucible_tensor* out, int32_t, void*) {
  float* y = static_cast<float*>(out[0].data);
  int64_t n = 1;
  for (int32_t d = 0; d < out[0].ndim; ++d) n *= out[0].shape[d];
  for (int64_t i = 0; i < n; ++i) y[i] = 0.0f;
  return 0;
}
)";

std::string status_of(const test::ScratchDir& dir, const fs::path& tasks, const std::string& task,
                      const std::string& source) {
  const fs::path file = dir.path() / (task + "_candidate.cpp");
  test::write_file(file, source);
  auto r = test::crucible_cli({"eval", "--task", task, "--tasks-dir", tasks.string(), "--candidate", file.string(),
                               "--json", "--timing-trials", "3"},
                              (dir.path() / "cache").string(), 300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.output.substr(r.output.find('{')))["status"].get<std::string>();
}

// A best-of-N sweep through every actor with the replay policy over DIR/replay/<task>/*.cpp, the tasks chosen by
// `selection` ([tasks] keys): each candidate's status, keyed "<task>/<file>".
std::map<std::string, std::string> sweep_statuses(const test::ScratchDir& dir, const fs::path& tasks,
                                                  const std::string& selection) {
  test::write_file(dir.path() / "sweep.toml", R"([experiment]
name = "kb_sweep"
mode = "best_of_n"
[tasks]
)" + selection + R"(
dir = ")" + tasks.string() + R"("
[policy]
kind = "replay"
replay_dir = ")" + (dir.path() / "replay").string() + R"("
[best_of_n]
k = 2
group_size = 2
[eval]
devices = ["cpu"]
mode = "fast"
timing_trials = 3
)");
  auto sweep = test::crucible_cli({"run", (dir.path() / "sweep.toml").string(), "--out", (dir.path() / "run").string(),
                                   "--quiet"},
                                  (dir.path() / "cache").string(), 600);
  INFO(sweep.output);
  REQUIRE(sweep.exit_code == 0);
  std::map<std::string, std::string> status;
  std::ifstream records(dir.path() / "run" / "seed-1" / "candidates.jsonl");
  for (std::string line; std::getline(records, line);) {
    const auto c = json::parse(line);
    status[c["task"].get<std::string>() + "/" + c["policy_output"].get<std::string>()] = c["status"];
    MESSAGE(line.substr(0, 600));  // shown when a check on the statuses fails
  }
  return status;
}

}  // namespace

TEST_CASE("KernelBench problems import as tasks whose references judge naive and zero-filling candidates") {
  if (!python_has_torch()) {
    MESSAGE("skipped: /usr/bin/python3 has no torch (tools/setup.sh installs Debian's python3-torch)");
    return;
  }
  test::ScratchDir dir("kb-import");
  const fs::path problems = dir.path() / "KernelBench";
  write_problems(problems / "level1", problems / "level2");
  const fs::path tasks = dir.path() / "tasks";
  auto r = test::crucible_cli({"tasks", "import", "--kernelbench", problems.string(), "--out", tasks.string(), "--json"},
                              (dir.path() / "cache").string(), 900);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json report = json::parse(r.output.substr(r.output.rfind("{\"imported\"")));
  std::set<std::string> imported(report["imported"].begin(), report["imported"].end());
  CHECK(imported == std::set<std::string>{"kb_l1_1", "kb_l1_2", "kb_l1_5", "kb_l2_3"});
  REQUIRE(report["refused"].size() == 1);
  CHECK(report["refused"][0]["problem"].get<std::string>().find("4_Dropout.py") != std::string::npos);
  CHECK_FALSE(report["refused"][0]["reason"].get<std::string>().empty());

  // The tasks list and show like the shipped ones.
  auto list = test::crucible_cli({"tasks", "--tasks-dir", tasks.string(), "list"}, (dir.path() / "cache").string());
  CHECK(list.exit_code == 0);
  CHECK(list.output.find("kb_l2_3") != std::string::npos);

  // Each reference runs alone at its CPU sizes; a broken program is named, with exit code 1.
  auto check = test::crucible_cli({"tasks", "--tasks-dir", tasks.string(), "check", "--json"},
                                  (dir.path() / "cache").string(), 300);
  INFO(check.output);
  CHECK(check.exit_code == 0);
  std::map<std::string, std::string> checked;
  for (const auto& row : json::parse(check.output.substr(check.output.find('['))))
    checked[row["task"].get<std::string>()] = row["status"].get<std::string>();
  CHECK(checked == std::map<std::string, std::string>{
                       {"kb_l1_1", "ok"}, {"kb_l1_2", "ok"}, {"kb_l1_5", "ok"}, {"kb_l2_3", "ok"}});
  const fs::path broken = dir.path() / "broken";
  fs::create_directories(broken);
  fs::copy_file(tasks / "kb_l1_1.toml", broken / "kb_l1_1.toml");
  test::write_file(broken / "kb_l1_1.cpu.pt", "not a TorchScript archive");
  auto broken_check = test::crucible_cli({"tasks", "--tasks-dir", broken.string(), "check"},
                                         (dir.path() / "cache").string(), 300);
  INFO(broken_check.output);
  CHECK(broken_check.exit_code == 1);
  CHECK(broken_check.output.find("kb_l1_1") != std::string::npos);
  CHECK(broken_check.output.find("failed") != std::string::npos);

  CHECK(status_of(dir, tasks, "kb_l1_1", kRelu) == "correct");
  CHECK(status_of(dir, tasks, "kb_l1_2", kSumDim1) == "correct");
  CHECK(status_of(dir, tasks, "kb_l2_3", kGemmRelu) == "correct");
  CHECK(status_of(dir, tasks, "kb_l1_5", kConv2d) == "correct");
  for (const char* task : {"kb_l1_1", "kb_l1_2", "kb_l1_5", "kb_l2_3"}) {
    CAPTURE(task);
    CHECK(status_of(dir, tasks, task, kZeros) != "correct");
  }

  // A best-of-N sweep over imported tasks through every actor, with the replay policy.
  for (const auto& [task, naive] : {std::pair<const char*, std::string>{"kb_l1_1", kRelu}, std::pair<const char*, std::string>{"kb_l2_3", kGemmRelu}}) {
    test::write_file(dir.path() / "replay" / task / "a_naive.cpp", naive);
    test::write_file(dir.path() / "replay" / task / "b_zeros.cpp", kZeros);
  }
  const auto status = sweep_statuses(dir, tasks, R"(names = ["kb_l1_1", "kb_l2_3"])");
  CHECK(status == std::map<std::string, std::string>{{"kb_l1_1/a_naive.cpp", "correct"},
                                                     {"kb_l1_1/b_zeros.cpp", "incorrect"},
                                                     {"kb_l2_3/a_naive.cpp", "correct"},
                                                     {"kb_l2_3/b_zeros.cpp", "incorrect"}});
}

TEST_CASE("real KernelBench problems of five families, input transforms and a constant answer judge naive candidates") {
  const fs::path kernelbench = test::source_dir().parent_path() / "shared" / "kernelbench" / "KernelBench";
  if (!python_has_torch() || !fs::exists(kernelbench)) {
    MESSAGE("skipped: needs /usr/bin/python3 with torch and ../shared/kernelbench");
    return;
  }
  test::ScratchDir dir("kb-real");
  const fs::path tasks = dir.path() / "tasks";
  // task -> (problem file, naive candidate written from the task's prompt)
  const std::map<std::string, std::pair<std::string, std::string>> problems{
      {"kb_l1_19", {"level1/19_ReLU.py", kRelu}},                                           // an activation
      {"kb_l1_47", {"level1/47_Sum_reduction_over_a_dimension.py", kSumDim1}},              // a reduction
      {"kb_l1_14", {"level1/14_Matmul_for_upper_triangular_matrices.py", kTriuMatmul}},     // a matmul variant
      {"kb_l1_13", {"level1/13_Matmul_for_symmetric_matrices.py", kSymmetricMatmul}},       // symmetric inputs
      {"kb_l1_63", {"level1/63_conv_standard_2D__square_input__square_kernel.py", kConv2d}},  // weight as input
      {"kb_l2_12", {"level2/12_Gemm_Multiply_LeakyReLU.py", kGemmMultiplyLeakyRelu}},       // a level-2 fusion
      {"kb_l1_100", {"level1/100_HingeLoss.py", kHingeLoss}},                               // +-1, concentrates
      {"kb_l2_80", {"level2/80_Gemm_Max_Subtract_GELU.py", kZeros}},                        // a constant answer
  };
  std::vector<std::string> args{"tasks", "import", "--out", tasks.string(), "--json", "--kernelbench"};
  for (const auto& [task, problem] : problems) args.push_back((kernelbench / problem.first).string());
  auto r = test::crucible_cli(args, (dir.path() / "cache").string(), 900);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json report = json::parse(r.output.substr(r.output.rfind("{\"imported\"")));
  CHECK(report["refused"].empty());
  REQUIRE(report["imported"].size() == problems.size());

  for (const auto& [task, problem] : problems) {
    CAPTURE(task);
    CHECK(status_of(dir, tasks, task, problem.second) == "correct");
    if (task != "kb_l2_80") CHECK(status_of(dir, tasks, task, kZeros) != "correct");
  }

  // HingeLoss's answer sits near 1 for every draw: the task asks for enough trials that the constant 1 fails.
  CHECK(test::read_file(tasks / "kb_l1_100.toml").find("min_correctness_trials = ") != std::string::npos);
  CHECK(status_of(dir, tasks, "kb_l1_100", kOne) == "incorrect");

  // A best-of-N sweep over imported level-1 tasks with the replay policy: every candidate judged as alone.
  for (const std::string task : {"kb_l1_19", "kb_l1_14", "kb_l1_13"}) {
    test::write_file(dir.path() / "replay" / task / "a_naive.cpp", problems.at(task).second);
    test::write_file(dir.path() / "replay" / task / "b_zeros.cpp", kZeros);
  }
  const auto status = sweep_statuses(dir, tasks, "levels = [1]\nproblems = [19, 14, 13]");
  CHECK(status == std::map<std::string, std::string>{{"kb_l1_14/a_naive.cpp", "correct"},
                                                     {"kb_l1_14/b_zeros.cpp", "incorrect"},
                                                     {"kb_l1_19/a_naive.cpp", "correct"},
                                                     {"kb_l1_19/b_zeros.cpp", "incorrect"},
                                                     {"kb_l1_13/a_naive.cpp", "correct"},
                                                     {"kb_l1_13/b_zeros.cpp", "incorrect"}});
}

TEST_CASE("a shipped task and the KernelBench problem it names give its naive candidate the same verdict") {
  const fs::path kernelbench = test::source_dir().parent_path() / "shared" / "kernelbench" / "KernelBench";
  if (!python_has_torch() || !fs::exists(kernelbench)) {
    MESSAGE("skipped: needs /usr/bin/python3 with torch and ../shared/kernelbench");
    return;
  }
  test::ScratchDir dir("kb-shipped");
  std::map<std::string, std::string> imported_name;  // shipped task -> its problem's task name
  std::vector<std::string> args{"tasks", "import", "--out", (dir.path() / "tasks").string(), "--json", "--kernelbench"};
  for (const auto& entry : fs::directory_iterator(test::tasks_dir())) {
    const std::string text = test::read_file(entry.path());
    const auto at = text.find("problem = \"level1/");
    if (at == std::string::npos) continue;
    const std::string problem = text.substr(at + 11, text.find('"', at + 11) - at - 11);  // level1/<id>_<Name>.py
    const std::string id = problem.substr(7, problem.find('_') - 7);
    imported_name[entry.path().stem().string()] = "kb_l1_" + id;
    args.push_back((kernelbench / problem).string());
  }
  REQUIRE(imported_name.size() >= 5);
  auto r = test::crucible_cli(args, (dir.path() / "cache").string(), 900);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (const auto& [shipped, kb] : imported_name) {
    CAPTURE(shipped);
    const std::string naive = test::read_file(test::source_dir() / "configs" / "candidates" / "cpu" / (shipped + ".cpp"));
    const auto ours = status_of(dir, test::tasks_dir(), shipped, naive);
    CHECK(ours == "correct");
    CHECK(status_of(dir, dir.path() / "tasks", kb, naive) == ours);
  }
}

TEST_CASE("crucible tasks import refuses bad input with exit code 2") {
  test::ScratchDir dir("kb-import-bad");
  auto r = test::crucible_cli({"tasks", "import", "--kernelbench", (dir.path() / "nowhere").string(), "--out",
                               (dir.path() / "out").string()},
                              (dir.path() / "cache").string());
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("no such KernelBench problem path") != std::string::npos);
}

namespace {

// A problem of KernelBench's shape on a 4 x 64 input: `prelude` runs at import, `forward` is the body of forward(x).
std::string tiny_problem(const std::string& forward, const std::string& prelude = "") {
  return "import torch\nimport torch.nn as nn\n" + prelude +
         "\nclass Model(nn.Module):\n    def __init__(self):\n        super(Model, self).__init__()\n\n"
         "    def forward(self, x):\n" + forward +
         "\ndef get_inputs():\n    return [torch.randn(4, 64)]\n\ndef get_init_inputs():\n    return []\n";
}

const std::string kTinyReluProblem = tiny_problem("        return torch.relu(x)\n");

// Prints a report of its own on every channel it has: print, fd 1, fd 2, and a process of its own that writes once
// the import program has exited, so that its line comes after anything the import program wrote.
const std::string kReluPrintingAReport = tiny_problem("        return torch.relu(x)\n", R"py(import os, sys, time
FAKE = '{"imported": ["kb_l1_7"], "refused": []}'
print(FAKE, flush=True)
os.write(1, (FAKE + "\n").encode())
sys.stderr.write(FAKE + "\n")


def running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


if not os.environ.get("REPORT_WRITER_STARTED"):
    os.environ["REPORT_WRITER_STARTED"] = "1"
    importer = os.getppid()
    if os.fork() == 0:  # writes once the import program has exited
        while running(importer):
            time.sleep(0.05)
        os.write(1, (FAKE + "\n").encode())
        os.write(2, (FAKE + "\n").encode())
        os._exit(0)

)py");

const std::string kScalesItsInputProblem = tiny_problem("        x.mul_(2)\n        return x\n");

eval::ProcessResult import_problems(const test::ScratchDir& dir) {
  return test::crucible_cli({"tasks", "import", "--kernelbench", (dir.path() / "KernelBench").string(), "--out",
                             (dir.path() / "tasks").string(), "--json"},
                            (dir.path() / "cache").string(), 600);
}

// The --json report: the CLI's last line (the import program's log comes before it, on stderr).
json import_report(const eval::ProcessResult& r) {
  const auto at = r.output.rfind("{\"imported\"");
  REQUIRE(at != std::string::npos);
  return json::parse(r.output.substr(at));
}

}  // namespace

TEST_CASE("crucible tasks import refuses a problem file whose name is not UTF-8 by name and imports the rest") {
  if (!python_has_torch()) {
    MESSAGE("skipped: /usr/bin/python3 has no torch (tools/setup.sh installs Debian's python3-torch)");
    return;
  }
  test::ScratchDir dir("kb-import-utf8");
  const fs::path level1 = dir.path() / "KernelBench" / "level1";
  fs::create_directories(level1);
  test::write_file(level1 / "1_ReLU.py", kTinyReluProblem);
  test::write_file(level1 / "2_Bad\xff" "Name.py", kTinyReluProblem);
  const auto r = import_problems(dir);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json report = import_report(r);
  CHECK(report["imported"] == json::array({"kb_l1_1"}));
  REQUIRE(report["refused"].size() == 1);
  CHECK(report["refused"][0]["problem"] == level1.string() + "/2_Bad\\xffName.py");
  CHECK(report["refused"][0]["reason"].get<std::string>().find("not valid UTF-8") != std::string::npos);
  CHECK(fs::exists(dir.path() / "tasks" / "kb_l1_1.toml"));
  CHECK_FALSE(fs::exists(dir.path() / "tasks" / "kb_l1_2.toml"));
}

TEST_CASE("crucible tasks import takes its report from its own channel, never from what a problem prints") {
  if (!python_has_torch()) {
    MESSAGE("skipped: /usr/bin/python3 has no torch (tools/setup.sh installs Debian's python3-torch)");
    return;
  }
  test::ScratchDir dir("kb-import-print");
  const fs::path level1 = dir.path() / "KernelBench" / "level1";
  fs::create_directories(level1);
  test::write_file(level1 / "1_ReLU_printing_a_report.py", kReluPrintingAReport);
  const auto r = import_problems(dir);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json report = import_report(r);
  CHECK(report == json{{"imported", {"kb_l1_1"}}, {"refused", json::array()}});
  // What the problem printed is shown as the import's log, before the report.
  CHECK(r.output.find(R"({"imported": ["kb_l1_7"], "refused": []})") < r.output.rfind("{\"imported\""));
}

TEST_CASE("crucible tasks import refuses a problem whose forward modifies its input") {
  if (!python_has_torch()) {
    MESSAGE("skipped: /usr/bin/python3 has no torch (tools/setup.sh installs Debian's python3-torch)");
    return;
  }
  test::ScratchDir dir("kb-import-mutate");
  const fs::path level1 = dir.path() / "KernelBench" / "level1";
  fs::create_directories(level1);
  test::write_file(level1 / "1_ReLU.py", kTinyReluProblem);
  test::write_file(level1 / "2_Scales_its_input.py", kScalesItsInputProblem);
  const auto r = import_problems(dir);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json report = import_report(r);
  CHECK(report["imported"] == json::array({"kb_l1_1"}));
  REQUIRE(report["refused"].size() == 1);
  CHECK(report["refused"][0]["problem"] == (level1 / "2_Scales_its_input.py").string());
  CHECK(report["refused"][0]["reason"].get<std::string>().find("forward modifies its input in place") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(dir.path() / "tasks" / "kb_l1_2.toml"));
}

TEST_CASE("crucible tasks import of paths that hold no problem file is an error with exit code 2") {
  if (!python_has_torch()) {
    MESSAGE("skipped: /usr/bin/python3 has no torch (tools/setup.sh installs Debian's python3-torch)");
    return;
  }
  test::ScratchDir dir("kb-import-empty");
  fs::create_directories(dir.path() / "KernelBench" / "level1");
  test::write_file(dir.path() / "KernelBench" / "README.md", "no problems here\n");
  const auto r = import_problems(dir);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("no KernelBench problem files (level<N>/<id>_<Name>.py) in " +
                      (dir.path() / "KernelBench").string()) != std::string::npos);
  CHECK(r.output.find("imported 0") == std::string::npos);
}
