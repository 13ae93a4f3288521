// A CUPTI injection library that prints where a program's GPU time went, kernel by kernel, without changing the
// program: every kernel (also those inside CUDA graphs) is recorded with its start and end, and at exit a table
// of the last KPROF_LAST_S seconds (default: all) is written to KPROF_OUT (default: stderr; also when SIGTERM ends the
// program), followed by how long the GPU sat idle between kernels. Kernels launched early (programmatic dependent
// launch) start while the kernel before them runs and mostly wait for it, so their whole span overstates them: the
// table is ordered by each kernel's own time, from its start or the end of everything that started before it,
// whichever is later, to its end (the spans' own times add up to the time the GPU was busy). With KPROF_MEMORY=1 it
// also records every allocation and release the driver sees (by any API, from any library) and reports device
// memory at its peak and at exit, by the shared object that asked for it: memory a program holds outside its own
// allocator shows up there (KPROF_KERNELS=0: memory only).
//
// Build (on a GPU node, the CMake target `crucible_kernel_profile` does the same):
//   g++ -O2 -shared -fPIC -I/usr/local/cuda/include tools/gpu_node/kernel_profile.cpp \
//       -L/usr/local/cuda/lib64 -lcupti -o /tmp/kernel_profile.so
// Use:
//   CUDA_INJECTION64_PATH=/tmp/kernel_profile.so KPROF_LAST_S=0.4 KPROF_OUT=/tmp/profile.txt ./program ...
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelSpan {
  std::string name;
  unsigned long long start_ns;
  unsigned long long end_ns;
};

struct MemoryEvent {
  unsigned long long at_ns;
  bool allocation;
  int kind;  // CUpti_ActivityMemoryKind
  unsigned long long bytes;
  unsigned long long address;
  std::string source;
};

std::mutex spans_mutex;
std::vector<KernelSpan> spans;
std::vector<MemoryEvent> memory_events;

constexpr size_t kBufferBytes = 8 << 20;

std::string readable(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* plain = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && plain != nullptr ? plain : mangled;
  std::free(plain);
  // The parameter list and anonymous namespaces say nothing that tells kernels apart; template arguments do.
  for (size_t at; (at = name.find("(anonymous namespace)::")) != std::string::npos;) name.erase(at, 23);
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      depth += name[i] == ')' ? 1 : name[i] == '(' ? -1 : 0;
      if (depth == 0) {
        name.erase(i);
        break;
      }
    }
  }
  if (name.size() > 120) name = name.substr(0, 80) + " ... " + name.substr(name.size() - 35);
  return name;
}

void CUPTIAPI give_buffer(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI take_buffer(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  CUpti_Activity* record = nullptr;
  std::vector<KernelSpan> taken;
  std::vector<MemoryEvent> memory;
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMORY2) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemory4*>(record);
      memory.push_back({m->timestamp, m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
                        static_cast<int>(m->memoryKind), m->bytes, m->address, m->source ? m->source : "?"});
      continue;
    }
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    taken.push_back({readable(kernel->name) + " <<<" + std::to_string(kernel->gridX * kernel->gridY * kernel->gridZ) + ">>>",
                     kernel->start, kernel->end});
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(spans_mutex);
  for (auto& span : taken) spans.push_back(std::move(span));
  for (auto& event : memory) memory_events.push_back(std::move(event));
}

void print_by_source(FILE* out, const char* when, const std::map<std::string, std::pair<double, size_t>>& by_source) {
  std::fprintf(out, "%s\n%12s %9s  %s\n", when, "GiB", "blocks", "kind/source");
  for (const auto& [source, total] : by_source)
    std::fprintf(out, "%12.3f %9zu  %s\n", total.first / (1 << 30), total.second, source.c_str());
}

// Replays allocations and releases in time order: what was live at the peak of device memory, and at exit.
void write_memory_report(FILE* out) {
  if (memory_events.empty()) return;
  std::sort(memory_events.begin(), memory_events.end(),
            [](const MemoryEvent& a, const MemoryEvent& b) { return a.at_ns < b.at_ns; });
  std::map<unsigned long long, const MemoryEvent*> live;
  unsigned long long device_live = 0, device_peak = 0;
  auto tally = [&] {
    std::map<std::string, std::pair<double, size_t>> by_source;
    for (const auto& [address, event] : live) {
      auto& t = by_source["kind " + std::to_string(event->kind) + " " + event->source];
      t.first += static_cast<double>(event->bytes), t.second += 1;
    }
    return by_source;
  };
  std::map<std::string, std::pair<double, size_t>> at_peak;
  for (const auto& event : memory_events) {
    const bool device = event.kind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    if (event.allocation) {
      live[event.address] = &event;
      if (device) device_live += event.bytes;
    } else if (auto it = live.find(event.address); it != live.end()) {
      if (it->second->kind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) device_live -= it->second->bytes;
      live.erase(it);
    }
    if (device && device_live > device_peak) device_peak = device_live, at_peak = tally();
  }
  std::fprintf(out, "\ndevice memory: peak %.3f GiB live, %.3f GiB live at exit (%zu events)\n",
               device_peak / double(1 << 30), device_live / double(1 << 30), memory_events.size());
  print_by_source(out, "live at the peak", at_peak);
  print_by_source(out, "live at exit", tally());
}

struct NameTotal {
  std::string name;
  size_t launches = 0;
  double total_us = 0;
  double own_us = 0;  // past the end of every kernel that started before it
};

void write_report() {
  static std::atomic<bool> written{false};  // once: a SIGTERM during the exit's report must not wait on its lock
  if (written.exchange(true)) return;
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(spans_mutex);
  const char* out_path = std::getenv("KPROF_OUT");
  FILE* out = out_path != nullptr ? std::fopen(out_path, "w") : stderr;
  if (out == nullptr) out = stderr;
  write_memory_report(out);
  if (spans.empty()) {
    std::fprintf(out, "kernel_profile: no kernels recorded\n");
    if (out != stderr) std::fclose(out);
    return;
  }
  std::sort(spans.begin(), spans.end(), [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  unsigned long long last_end = 0;
  for (const auto& span : spans) last_end = std::max(last_end, span.end_ns);
  const char* window_text = std::getenv("KPROF_LAST_S");
  const double window_s = window_text != nullptr ? std::atof(window_text) : 0.0;
  const unsigned long long window_start =
      window_s > 0 ? last_end - std::min<unsigned long long>(last_end, static_cast<unsigned long long>(window_s * 1e9)) : 0;

  std::map<std::string, NameTotal> by_name;
  double busy_us = 0;
  unsigned long long first_start = 0;
  unsigned long long covered_to = 0;
  // Idle gaps between the end of everything so far and the next kernel's start, in buckets of microseconds.
  const double bucket_edges_us[] = {1, 2, 4, 8, 16, 32, 64, 1e18};
  size_t gap_counts[8] = {};
  double gap_totals_us[8] = {};
  for (const auto& span : spans) {
    if (span.start_ns < window_start) continue;
    if (first_start == 0) first_start = span.start_ns;
    auto& total = by_name[span.name];
    total.name = span.name;
    total.launches += 1;
    total.total_us += (span.end_ns - span.start_ns) / 1e3;
    if (covered_to != 0 && span.start_ns > covered_to) {
      const double gap_us = (span.start_ns - covered_to) / 1e3;
      size_t bucket = 0;
      while (gap_us >= bucket_edges_us[bucket]) ++bucket;
      gap_counts[bucket] += 1;
      gap_totals_us[bucket] += gap_us;
    }
    const unsigned long long busy_from = std::max(span.start_ns, covered_to);
    if (span.end_ns > busy_from) {
      const double own_us = (span.end_ns - busy_from) / 1e3;
      busy_us += own_us;
      total.own_us += own_us;
    }
    covered_to = std::max(covered_to, span.end_ns);
  }
  std::vector<NameTotal> rows;
  for (auto& [name, total] : by_name) rows.push_back(total);
  std::sort(rows.begin(), rows.end(), [](const NameTotal& a, const NameTotal& b) { return a.own_us > b.own_us; });
  const double span_us = (last_end - first_start) / 1e3;
  std::fprintf(out, "window %.1f us, GPU busy %.1f us (%.1f%%)\n", span_us, busy_us, 100.0 * busy_us / span_us);
  std::fprintf(out, "%12s %10s %9s %10s %10s  %s\n", "own_us", "own_%", "launches", "own_mean", "span_mean", "kernel");
  for (const auto& row : rows)
    std::fprintf(out, "%12.1f %10.1f %9zu %10.2f %10.2f  %s\n", row.own_us, 100.0 * row.own_us / busy_us, row.launches,
                 row.own_us / row.launches, row.total_us / row.launches, row.name.c_str());
  std::fprintf(out, "\nidle gaps between kernels\n%12s %9s %12s\n", "below_us", "gaps", "total_us");
  for (size_t b = 0; b < 8; ++b)
    std::fprintf(out, "%12s %9zu %12.1f\n", b == 7 ? "rest" : std::to_string(int(bucket_edges_us[b])).c_str(),
                 gap_counts[b], gap_totals_us[b]);
  if (out != stderr) std::fclose(out);
}

// A run stopped by `timeout` (SIGTERM) still reports what it recorded: the report is written from the handler, not
// async-signal-safe, but the program is ending either way and a long run's profile is what was asked for.
void report_and_end(int signal_number) {
  write_report();
  std::_Exit(128 + signal_number);
}

}  // namespace

// The CUDA driver calls this once when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(give_buffer, take_buffer) != CUPTI_SUCCESS) return 0;
  const char* kernels = std::getenv("KPROF_KERNELS");  // 0: memory only (a long run's kernels take much host memory)
  if ((kernels == nullptr || std::strcmp(kernels, "0") != 0) &&
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
    return 0;
  const char* memory = std::getenv("KPROF_MEMORY");
  if (memory != nullptr && std::strcmp(memory, "1") == 0 && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2) != CUPTI_SUCCESS)
    return 0;
  std::atexit(write_report);
  std::signal(SIGTERM, report_and_end);
  return 1;
}
