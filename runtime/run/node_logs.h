#pragma once
// Where the log lines of evaluator nodes go in a run: logs/nodes/<node>/<component>.log, beside the coordinator
// node's own logs/<component>.log, in the same line format, so `crucible logs --node` reads them like any other.
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "run/durable_file.h"

namespace crucible::run {

// A node name is also a directory name: 1 to 64 of [A-Za-z0-9._-], not starting with '.', and not "local" (the
// coordinator node's own name).
bool valid_node_name(std::string_view name);
inline constexpr const char* kLocalNode = "local";

class NodeLogWriter {
 public:
  explicit NodeLogWriter(std::filesystem::path log_dir) : log_dir_(std::move(log_dir)) {}
  // Appends one line (a newline is added) to the node's file of `component`. Lines are capped at 64 KiB; a node
  // name that is not valid_node_name is a RunError.
  void write(const std::string& node, const std::string& component, std::string text);

 private:
  std::filesystem::path log_dir_;
  std::map<std::filesystem::path, AppendFile> files_;
};

}  // namespace crucible::run
