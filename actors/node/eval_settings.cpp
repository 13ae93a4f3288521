#include "actors/node/eval_settings.h"

#include <fstream>
#include <thread>

#include "config/text_file.h"

namespace crucible::node {

std::vector<messages::TaskText> task_texts(const std::vector<eval::TaskSpec>& tasks) {
  std::vector<messages::TaskText> out;
  for (const auto& t : tasks) out.push_back({t.name, config::read_text_file(t.source_path)});
  return out;
}

namespace {

// "model name : ..." of /proc/cpuinfo, and MemTotal of /proc/meminfo.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0)
      if (auto colon = line.find(':'); colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
  return "cpu";
}

uint64_t memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

}  // namespace

std::vector<messages::NodeDevice> describe_devices(const std::vector<eval::Device>& devices) {
  std::vector<messages::NodeDevice> out;
  for (const auto& d : devices) {
    messages::NodeDevice nd;
    nd.device = d;
    if (!d.is_cuda()) {
      nd.name = cpu_model();
      nd.memory_bytes = memory_bytes();
      nd.multiprocessors = static_cast<int32_t>(std::thread::hardware_concurrency());
    } else {
      try {
        const auto gpu = eval::describe_gpu(d.index);
        nd.name = gpu.name;
        nd.memory_bytes = gpu.memory_bytes;
        nd.cc_major = gpu.cc_major;
        nd.cc_minor = gpu.cc_minor;
        nd.multiprocessors = gpu.multiprocessors;
      } catch (const std::exception& e) {
        throw std::invalid_argument("device " + d.name() + ": " + e.what());
      }
    }
    out.push_back(std::move(nd));
  }
  return out;
}

}  // namespace crucible::node
