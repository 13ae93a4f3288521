#pragma once
// A gpt-oss checkpoint with dense experts rewritten as the released checkpoints store them: each expert projection
// `...mlp.experts.gate_up_proj` / `down_proj` becomes `_blocks` [E, out, in / 32, 16] and `_scales` [E, out, in / 32]
// (mxfp4.h); every other tensor is copied unchanged.
#include <vector>

#include "lm/format/model_config.h"
#include "lm/format/model_files.h"
#include "lm/format/safetensors.h"

namespace crucible::lm {

// Throws ModelFormatError for a model without experts, or an expert tensor of another shape.
std::vector<TensorBytes> mxfp4_checkpoint_tensors(const ModelConfig& config, const ModelFiles& files);

}  // namespace crucible::lm
