#include "lm/generation/decode_step.h"

#include <ATen/ATen.h>

#include "lm/kernels/decode_kernels.h"

namespace crucible::lm {

DecodeBuffers make_decode_buffers(const Transformer& model, int64_t batch, int64_t capacity) {
  const auto index = at::TensorOptions().dtype(at::kLong).device(model.options().device);
  DecodeBuffers b;
  b.cache = model.make_cache(batch, capacity);
  b.key_valid = at::zeros({batch, capacity}, index.dtype(at::kBool));
  b.token = at::zeros({batch, 1}, index);
  b.position = at::zeros({batch, 1}, index);
  b.slot = at::zeros({1}, index);
  return b;
}

at::Tensor decode_step(const Transformer& model, DecodeBuffers& b, int64_t visible) {
  b.key_valid.index_fill_(1, b.slot, true);
  AttentionInputs attention;
  attention.positions = b.position;
  attention.slots = b.slot;
  attention.visible = visible;
  if (decode_attention_serves(b.cache.keys.front(), model.config().num_heads))
    attention.key_valid = b.key_valid;  // the kernels read slots up to the step's own, no mask
  else
    attention.mask = causal_mask(b.slot, b.key_valid, visible);
  const auto hidden = model.hidden_states(b.token, attention, b.cache);
  return model.logits_in_model_dtype(hidden.select(1, 0));
}

}  // namespace crucible::lm
