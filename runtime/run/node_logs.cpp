#include "run/node_logs.h"

#include "crucible/eval/utf8_text.h"

#include "logging/log.h"

namespace crucible::run {

bool valid_node_name(std::string_view name) {
  if (name.empty() || name.size() > 64 || name.front() == '.' || name == kLocalNode) return false;
  for (char c : name) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                       c == '_' || c == '-';
    if (!plain) return false;
  }
  return true;
}

void NodeLogWriter::write(const std::string& node, const std::string& component, std::string text) {
  if (!valid_node_name(node)) throw RunError("not a node name: '" + node + "'");
  // A node's text is untrusted: one line of valid UTF-8, at most 64 KiB, so it can forge no other line.
  constexpr std::size_t kMaxLine = 64 << 10;
  text = eval::valid_utf8_prefix(text, kMaxLine);
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  const auto path = log_dir_ / "nodes" / node / log::component_file_name(component);
  auto it = files_.find(path);
  if (it == files_.end()) {
    std::filesystem::create_directories(path.parent_path());
    it = files_.emplace(path, AppendFile(path)).first;
  }
  it->second.append(text + "\n");
}

}  // namespace crucible::run
