#include "config/text_file.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace crucible::config {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read " + path.string());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace crucible::config
