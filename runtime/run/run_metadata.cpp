#include "run/run_metadata.h"

#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include "run/durable_file.h"

#ifndef CRUCIBLE_VERSION_TEXT
#define CRUCIBLE_VERSION_TEXT "unknown"
#endif
#ifndef CRUCIBLE_GIT_COMMIT
#define CRUCIBLE_GIT_COMMIT "unknown"
#endif

namespace crucible::run {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string trimmed(std::string s) {
  const auto a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return trimmed(line.substr(line.find(':') + 1));
  return "unknown";
}

// The NVIDIA driver names its GPUs under /proc without a CUDA context (none is made in the run's own process).
json gpus() {
  json out = json::array();
  std::error_code ec;
  for (const auto& gpu : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    std::ifstream in(gpu.path() / "information");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("Model:", 0) == 0) out.push_back(trimmed(line.substr(6)));
  }
  return out;
}

}  // namespace

std::string crucible_version() { return CRUCIBLE_VERSION_TEXT; }
std::string build_commit() { return CRUCIBLE_GIT_COMMIT; }

json start_metadata(bool resumed) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  double load[3] = {0, 0, 0};
  const int n = getloadavg(load, 3);
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"started_at", stamp},
          {"resumed", resumed},
          {"version", crucible_version()},
          {"commit", build_commit()},
          {"host", host},
          {"cpu", cpu_model()},
          {"cores", std::thread::hardware_concurrency()},
          {"gpus", gpus()},
          {"load_average", n == 3 ? json{load[0], load[1], load[2]} : json(nullptr)}};
}

json record_start(const fs::path& run_dir, bool resumed) {
  const json meta = start_metadata(resumed);
  AppendFile file(run_dir / "starts.jsonl");
  file.append(meta.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  file.sync();
  return meta;
}

}  // namespace crucible::run
