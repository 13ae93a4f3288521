#pragma once
// A worker's process image as the kernel reports it (/proc/<pid>/smaps and status), read by the evaluator from
// outside the worker, and the comparison that decides whether a reset worker is back to its trusted setup
// (docs/cuda.md, "Reusing a worker"). Nothing here asks the worker: it cannot lie about these.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crucible::eval {

struct Mapping {
  uint64_t start = 0, end = 0, offset = 0;
  std::string perms;  // "r-xp"
  std::string path;   // empty for anonymous memory; "[heap]" and the like for the kernel's own
  uint64_t anonymous_kb = 0;  // in a file mapping: pages written since they were mapped (copied on write)
  bool executable() const { return perms.size() > 2 && perms[2] == 'x'; }
  bool writable() const { return perms.size() > 1 && perms[1] == 'w'; }
  bool accessible() const { return perms.size() > 2 && (perms[0] == 'r' || perms[1] == 'w' || perms[2] == 'x'); }
  bool file_backed() const { return !path.empty() && path[0] == '/'; }
};

struct ProcessImage {
  std::vector<Mapping> mappings;
  int threads = -1, seccomp_filters = -1;
  std::string signals_ignored, signals_caught, signals_blocked;  // the hexadecimal masks of status
};

ProcessImage parse_smaps(std::string_view smaps);
void parse_status(std::string_view status, ProcessImage& image);
std::optional<ProcessImage> read_process_image(pid_t pid);  // nullopt when /proc cannot be read

struct ImageAllowance {
  // Anonymous memory (heap included) that may have appeared: the allocator keeps what it freed.
  uint64_t new_anonymous_bytes = uint64_t{256} << 20;
  int added_filters = 0;  // seccomp filters installed since the baseline by the worker itself
  // File mappings that may appear: the GPU driver maps its device files for its own memory.
  std::vector<std::string> new_file_prefixes{"/dev/nvidia"};
};

// Empty when `now` is back to `baseline` within the allowance, else the first difference found.
std::string compare_images(const ProcessImage& baseline, const ProcessImage& now, const ImageAllowance& allowance);

}  // namespace crucible::eval
