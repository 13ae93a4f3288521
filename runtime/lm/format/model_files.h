#pragma once
// The weight files of a Hugging Face model directory: model.safetensors, or the shards that
// model.safetensors.index.json lists. Keeps every shard mapped while the views are in use.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lm/format/safetensors.h"

namespace crucible::lm {

class ModelFiles {
 public:
  // Throws ModelFormatError when the directory has no weights, the index names a missing shard, or a tensor
  // the index promises is not in its shard.
  static ModelFiles open(const std::filesystem::path& model_dir);

  const TensorView* find(const std::string& name) const;
  const TensorView& require(const std::string& name) const;  // throws "missing tensor NAME in DIR"
  std::vector<std::string> names() const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::vector<std::shared_ptr<const SafetensorsFile>> shards_;
  std::map<std::string, const TensorView*> tensors_;
};

// Whether a tensor's name ends with `tail` ("..._scales", "mlp.experts.down_proj").
inline bool name_ends_with(const std::string& name, const std::string& tail) {
  return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace crucible::lm
