#include "lm/format/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace crucible::lm {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  std::size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::f32, "F32", 4}, {DType::f16, "F16", 2}, {DType::bf16, "BF16", 2}, {DType::f64, "F64", 8},
    {DType::i64, "I64", 8}, {DType::i32, "I32", 4}, {DType::i16, "I16", 2},   {DType::i8, "I8", 1},
    {DType::u8, "U8", 1},   {DType::boolean, "BOOL", 1},
};

const DTypeInfo& info(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d;
  throw ModelFormatError("unknown dtype");
}

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& why) {
  throw ModelFormatError(path.string() + ": " + why);
}

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<uint64_t>(p[i]);
  return v;
}

}  // namespace

std::size_t dtype_size(DType t) { return info(t).size; }
std::string dtype_name(DType t) { return info(t).name; }

DType parse_dtype(const std::string& name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  throw ModelFormatError("unsupported safetensors dtype " + name);
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(path, "cannot stat");
  }
  file->map_size_ = static_cast<std::size_t>(st.st_size);
  if (file->map_size_ < 8) {
    ::close(fd);
    fail(path, "too short for a safetensors header");
  }
  void* map = ::mmap(nullptr, file->map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) fail(path, "mmap failed");
  file->map_ = map;

  const auto* base = static_cast<const std::byte*>(map);
  const uint64_t header_len = read_le64(base);
  if (header_len > file->map_size_ - 8) fail(path, "header length " + std::to_string(header_len) + " past the end");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(base + 8),
                                   reinterpret_cast<const char*>(base + 8 + header_len));
  } catch (const std::exception& e) {
    fail(path, std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");

  const std::byte* data = base + 8 + header_len;
  const std::size_t data_size = file->map_size_ - 8 - header_len;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, v] : entry.items())
        if (v.is_string()) file->metadata_[k] = v.get<std::string>();
      continue;
    }
    try {
      TensorView view;
      view.name = name;
      view.dtype = parse_dtype(entry.at("dtype").get<std::string>());
      view.shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size)
        fail(path, "tensor " + name + ": data_offsets outside the data section");
      for (auto d : view.shape)
        if (d < 0) fail(path, "tensor " + name + ": negative dimension");
      view.nbytes = offsets[1] - offsets[0];
      if (static_cast<uint64_t>(view.numel()) * dtype_size(view.dtype) != view.nbytes)
        fail(path, "tensor " + name + ": " + std::to_string(view.nbytes) + " bytes do not match its dtype and shape");
      view.data = data + offsets[0];
      ranges.emplace_back(offsets[0], offsets[1]);
      file->index_[name] = file->tensors_.size();
      file->tensors_.push_back(std::move(view));
    } catch (const nlohmann::json::exception& e) {
      fail(path, "tensor " + name + ": malformed entry (" + e.what() + ")");
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail(path, "tensors overlap in the data section");
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorBytes>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorBytes*> ordered;
  for (const auto& t : tensors) ordered.push_back(&t);
  std::sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->name < b->name; });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* t : ordered) {
    int64_t numel = 1;
    for (auto d : t->shape) numel *= d;
    if (static_cast<uint64_t>(numel) * dtype_size(t->dtype) != t->bytes.size())
      throw ModelFormatError("write_safetensors: " + t->name + " has a byte count that does not match its shape");
    header[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ModelFormatError("cannot write " + tmp);
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((text.size() >> (8 * i)) & 0xff);
    out.write(reinterpret_cast<const char*>(len), 8);
    out << text;
    for (const auto* t : ordered) out.write(reinterpret_cast<const char*>(t->bytes.data()), t->bytes.size());
    if (!out) throw ModelFormatError("short write to " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace crucible::lm
