#include "lm/format/model_files.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace crucible::lm {

ModelFiles ModelFiles::open(const std::filesystem::path& model_dir) {
  ModelFiles files;
  files.dir_ = model_dir;
  const auto index_path = model_dir / "model.safetensors.index.json";
  const auto single_path = model_dir / "model.safetensors";
  std::map<std::string, std::string> promised;  // tensor -> shard file, from the index
  std::vector<std::string> shard_names;
  if (std::filesystem::exists(index_path)) {
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(std::ifstream(index_path));
      for (const auto& [tensor, shard] : index.at("weight_map").items()) promised[tensor] = shard.get<std::string>();
    } catch (const std::exception& e) {
      throw ModelFormatError(index_path.string() + ": malformed index (" + e.what() + ")");
    }
    std::set<std::string> unique;
    for (const auto& [tensor, shard] : promised)
      if (unique.insert(shard).second) shard_names.push_back(shard);
  } else if (std::filesystem::exists(single_path)) {
    shard_names.push_back("model.safetensors");
  } else {
    throw ModelFormatError(model_dir.string() +
                           ": no model.safetensors or model.safetensors.index.json (only safetensors weights load)");
  }
  for (const auto& shard : shard_names) {
    const auto path = model_dir / shard;
    if (!std::filesystem::exists(path))
      throw ModelFormatError(index_path.string() + ": names shard " + shard + ", which is missing");
    files.shards_.push_back(SafetensorsFile::open(path));
    for (const auto& view : files.shards_.back()->tensors()) {
      if (files.tensors_.count(view.name))
        throw ModelFormatError(path.string() + ": tensor " + view.name + " appears in two shards");
      files.tensors_[view.name] = &view;
    }
  }
  for (const auto& [tensor, shard] : promised) {
    auto it = files.tensors_.find(tensor);
    if (it == files.tensors_.end())
      throw ModelFormatError((model_dir / shard).string() + ": missing tensor " + tensor + " that the index lists");
  }
  return files;
}

const TensorView* ModelFiles::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

const TensorView& ModelFiles::require(const std::string& name) const {
  const auto* view = find(name);
  if (!view) throw ModelFormatError(dir_.string() + ": missing tensor " + name);
  return *view;
}

std::vector<std::string> ModelFiles::names() const {
  std::vector<std::string> out;
  for (const auto& [name, view] : tensors_) out.push_back(name);
  return out;
}

}  // namespace crucible::lm
