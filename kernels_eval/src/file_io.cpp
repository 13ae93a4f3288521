#include "file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace crucible::eval {
namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string read_file_or_empty(const fs::path& p) {
  try {
    return read_file(p);
  } catch (const std::exception&) {
    return {};
  }
}

void write_file_atomically(const fs::path& target, const std::string& data) {
  fs::path tmp = target;
  tmp += ".tmp" + std::to_string(getpid());
  std::ofstream out(tmp, std::ios::binary);
  out << data;
  out.close();
  if (!out) {  // a full disk: nothing half-written is published
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw std::runtime_error("cannot write " + target.string() + ": " + std::strerror(errno));
  }
  fs::rename(tmp, target);
}

}  // namespace crucible::eval
