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

std::string read_text_file(const std::filesystem::path& path, std::size_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw std::invalid_argument("file not found");
  if (!std::filesystem::is_regular_file(path, ec)) throw std::invalid_argument("not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read the file");
  // Read one byte past the bound: a file that grows after a size check is caught all the same.
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw std::invalid_argument("cannot read the file");
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > max_bytes)
    throw std::invalid_argument("larger than " + std::to_string(max_bytes) + " bytes");
  return text;
}

}  // namespace crucible::config
