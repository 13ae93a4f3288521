#pragma once
// The safetensors format: an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape
// and byte range, then the raw little-endian bytes. The reader memory-maps the file and hands out views.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace crucible::lm {

struct ModelFormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class DType { f32, f16, bf16, f64, i64, i32, i16, i8, u8, boolean };

std::size_t dtype_size(DType t);
std::string dtype_name(DType t);        // the format's own spelling: F32, BF16, ...
DType parse_dtype(const std::string& name);  // throws ModelFormatError on anything else (F8_E4M3, ...)

struct TensorView {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  std::size_t nbytes = 0;

  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps the file read-only and checks the header: every range inside the data section, sizes that agree with
  // dtype x shape, no two tensors overlapping. Errors name the file.
  static std::shared_ptr<const SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: bytes already in the format's little-endian layout.
struct TensorBytes {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

// Writes a safetensors file (header padded to 8 bytes, tensors in name order), replacing `path` atomically.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorBytes>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace crucible::lm
