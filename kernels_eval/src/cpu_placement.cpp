#include "crucible/eval/cpu_placement.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace crucible::eval {

std::set<int> parse_cpu_list(const std::string& text) {
  std::set<int> cpus;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    if (item.empty()) return {};
    const auto dash = item.find('-');
    try {
      std::size_t used = 0;
      const int first = std::stoi(item.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? item.size() : dash) || first < 0) return {};
      int last = first;
      if (dash != std::string::npos) {
        const std::string tail = item.substr(dash + 1);
        last = std::stoi(tail, &used);
        if (used != tail.size() || last < first || last - first > 4096) return {};
      }
      for (int cpu = first; cpu <= last; ++cpu) cpus.insert(cpu);
    } catch (const std::exception&) {
      return {};
    }
  }
  return cpus;
}

std::optional<int> cpu_apart_from(int caller, const std::vector<int>& allowed,
                                  const std::function<std::set<int>(int)>& siblings) {
  std::vector<int> order = allowed;
  std::sort(order.begin(), order.end());
  // Starting after the caller spreads several evaluators' workers over the machine instead of piling them on CPU 0.
  std::rotate(order.begin(), std::upper_bound(order.begin(), order.end(), caller), order.end());
  const std::set<int> near = siblings(caller);
  for (int cpu : order)
    if (cpu != caller && !near.count(cpu)) return cpu;
  return std::nullopt;
}

std::set<int> machine_siblings(int cpu) {
  std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list");
  std::string text;
  std::getline(in, text);
  auto cpus = parse_cpu_list(text);
  cpus.insert(cpu);
  return cpus;
}

}  // namespace crucible::eval
