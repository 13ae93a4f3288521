#include "worker_image.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

namespace crucible::eval {
namespace {

// "start-end perms offset dev inode [path]": false for a line that is not a mapping's header.
bool parse_header(const std::string& line, Mapping& m) {
  std::istringstream in(line);
  std::string range, dev, inode;
  if (!(in >> range >> m.perms >> std::hex >> m.offset >> dev >> inode)) return false;
  const auto dash = range.find('-');
  if (dash == std::string::npos || m.perms.size() != 4) return false;
  try {
    m.start = std::stoull(range.substr(0, dash), nullptr, 16);
    m.end = std::stoull(range.substr(dash + 1), nullptr, 16);
  } catch (...) {
    return false;
  }
  std::getline(in >> std::ws, m.path);
  return true;
}

const Mapping* find_same(const ProcessImage& image, const Mapping& m) {
  for (const auto& b : image.mappings)
    if (b.start == m.start && b.end == m.end && b.perms == m.perms && b.offset == m.offset && b.path == m.path)
      return &b;
  return nullptr;
}

bool has_path(const ProcessImage& image, const std::string& path) {
  for (const auto& b : image.mappings)
    if (b.path == path) return true;
  return false;
}

uint64_t accessible_anonymous_bytes(const ProcessImage& image) {
  uint64_t bytes = 0;
  for (const auto& m : image.mappings)
    if (!m.file_backed() && (m.path.empty() || m.path == "[heap]") && m.accessible()) bytes += m.end - m.start;
  return bytes;
}

std::string hex(uint64_t v) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

// Mappings that may not be new: code (only the baseline's, exactly), files (but the driver's), the kernel's own
// areas (but a grown heap), and pages written in a file's read-only mapping (code or constants patched).
std::string compare_mapping(const ProcessImage& baseline, const Mapping& m, const ImageAllowance& allowance) {
  const std::string where = " at " + hex(m.start) + (m.path.empty() ? "" : " (" + m.path + ")");
  if (m.executable() && m.writable()) return "a writable and executable mapping" + where;
  const Mapping* same = find_same(baseline, m);
  if (m.executable() && !same) return "an executable mapping that the trusted setup did not have" + where;
  if (m.file_backed() && !has_path(baseline, m.path)) {
    bool allowed = false;
    for (const auto& prefix : allowance.new_file_prefixes) allowed = allowed || m.path.rfind(prefix, 0) == 0;
    if (!allowed) return "a file mapping that the trusted setup did not have" + where;
  }
  if (!m.path.empty() && m.path[0] == '[' && m.path != "[heap]" && !has_path(baseline, m.path))
    return "a kernel area that the trusted setup did not have" + where;
  if (m.file_backed() && !m.writable() && m.anonymous_kb > (same ? same->anonymous_kb : 0))
    return "pages of a read-only file mapping were written" + where;
  return {};
}

}  // namespace

ProcessImage parse_smaps(std::string_view smaps) {
  ProcessImage image;
  std::istringstream in{std::string(smaps)};
  std::string line;
  while (std::getline(in, line)) {
    Mapping m;
    if (parse_header(line, m)) {
      image.mappings.push_back(std::move(m));
    } else if (!image.mappings.empty() && line.rfind("Anonymous:", 0) == 0) {
      image.mappings.back().anonymous_kb = std::strtoull(line.c_str() + 10, nullptr, 10);
    }
  }
  return image;
}

void parse_status(std::string_view status, ProcessImage& image) {
  std::istringstream in{std::string(status)};
  std::string key, value;
  while (in >> key && std::getline(in >> std::ws, value)) {
    if (key == "Threads:") image.threads = std::atoi(value.c_str());
    if (key == "Seccomp_filters:") image.seccomp_filters = std::atoi(value.c_str());
    if (key == "SigIgn:") image.signals_ignored = value;
    if (key == "SigCgt:") image.signals_caught = value;
    if (key == "SigBlk:") image.signals_blocked = value;
  }
}

std::optional<ProcessImage> read_process_image(pid_t pid) {
  auto read = [pid](const char* name, std::string& text) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/" + name);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    return f.good() || f.eof();
  };
  std::string smaps, status;
  if (!read("smaps", smaps) || !read("status", status) || smaps.empty() || status.empty()) return std::nullopt;
  ProcessImage image = parse_smaps(smaps);
  parse_status(status, image);
  if (image.mappings.empty() || image.threads < 1) return std::nullopt;
  return image;
}

std::string compare_images(const ProcessImage& baseline, const ProcessImage& now, const ImageAllowance& allowance) {
  if (now.threads != baseline.threads)
    return "threads: " + std::to_string(now.threads) + " against " + std::to_string(baseline.threads);
  if (now.seccomp_filters != baseline.seccomp_filters + allowance.added_filters)
    return "seccomp filters: " + std::to_string(now.seccomp_filters);
  if (now.signals_ignored != baseline.signals_ignored || now.signals_caught != baseline.signals_caught ||
      now.signals_blocked != baseline.signals_blocked)
    return "signal dispositions or mask changed";
  for (const auto& m : now.mappings)
    if (std::string why = compare_mapping(baseline, m, allowance); !why.empty()) return why;
  const uint64_t before = accessible_anonymous_bytes(baseline), after = accessible_anonymous_bytes(now);
  if (after > before + allowance.new_anonymous_bytes)
    return "anonymous memory grew by " + std::to_string((after - before) >> 20) + " MiB";
  return {};
}

}  // namespace crucible::eval
