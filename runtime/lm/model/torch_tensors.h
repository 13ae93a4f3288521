#pragma once
// Between safetensors views/bytes and LibTorch tensors.
#include <ATen/core/Tensor.h>

#include <string>

#include "lm/format/safetensors.h"

namespace crucible::lm {

// A CPU tensor over the view's mapped bytes (no copy): valid while the file stays open; clone or .to() to keep.
at::Tensor view_to_tensor(const TensorView& view);
// Bytes of a tensor (moved to the CPU, made contiguous) ready for write_safetensors.
TensorBytes tensor_to_bytes(const std::string& name, const at::Tensor& tensor);

}  // namespace crucible::lm
