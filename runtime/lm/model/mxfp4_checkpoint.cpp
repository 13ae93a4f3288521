#include "lm/model/mxfp4_checkpoint.h"

#include <ATen/ATen.h>

#include <cstring>
#include <optional>

#include "lm/model/moe.h"
#include "lm/model/mxfp4.h"
#include "lm/model/torch_tensors.h"

namespace crucible::lm {
namespace {

// The (out, in) of an expert projection, or nothing for any other tensor.
std::optional<std::pair<int64_t, int64_t>> expert_projection(const std::string& name, const ModelConfig& c) {
  if (name_ends_with(name, "mlp.experts.gate_up_proj")) return std::pair{2 * c.intermediate_size, c.hidden_size};
  if (name_ends_with(name, "mlp.experts.down_proj")) return std::pair{c.hidden_size, c.intermediate_size};
  return std::nullopt;
}

TensorBytes copied(const TensorView& v) {
  TensorBytes t{v.name, v.dtype, v.shape, std::vector<std::byte>(v.nbytes)};
  std::memcpy(t.bytes.data(), v.data, v.nbytes);
  return t;
}

}  // namespace

std::vector<TensorBytes> mxfp4_checkpoint_tensors(const ModelConfig& c, const ModelFiles& files) {
  if (!c.moe) throw ModelFormatError(files.dir().string() + ": not a mixture-of-experts model: nothing to pack");
  std::vector<TensorBytes> out;
  for (const auto& name : files.names()) {
    const auto& view = files.require(name);
    const auto projection = expert_projection(name, c);
    if (!projection) {
      out.push_back(copied(view));
      continue;
    }
    const auto [rows, cols] = *projection;
    const int64_t E = c.moe->num_experts;
    const bool out_in = experts_stored_out_in(view.shape, E, rows, cols);
    if (!out_in && view.shape != std::vector<int64_t>{E, cols, rows})
      throw ModelFormatError(files.dir().string() + ": tensor " + name + " is not [experts, in, out] or [experts, out, in]");
    const auto stored = view_to_tensor(view).to(at::kFloat);
    const auto packed = mxfp4_encode(out_in ? stored : stored.transpose(1, 2));
    out.push_back(tensor_to_bytes(name + "_blocks", packed.blocks));
    out.push_back(tensor_to_bytes(name + "_scales", packed.scales));
  }
  return out;
}

}  // namespace crucible::lm
