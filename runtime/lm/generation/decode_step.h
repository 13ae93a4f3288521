#pragma once
// One decode step over static buffers: the same code runs eagerly and inside a CUDA graph capture.
#include <ATen/core/Tensor.h>

#include "lm/model/kv_cache.h"
#include "lm/model/transformer.h"

namespace crucible::lm {

struct DecodeBuffers {
  KvCache cache;
  at::Tensor key_valid;  // [B, capacity] bool: slots that hold a real (not padding) token
  at::Tensor token;      // [B, 1] int64: the token to feed
  at::Tensor position;   // [B, 1] int64: its rotary position
  at::Tensor slot;       // [1] int64: the cache slot it goes to (shared by all rows)
};

DecodeBuffers make_decode_buffers(const Transformer& model, int64_t batch, int64_t capacity);

// Marks `slot` valid, writes the token's keys and values there, and returns next-token logits [B, V] in the model's
// dtype.
// Attention reads cache slots [0, visible): slot + 1 eagerly, the whole capacity inside a graph.
at::Tensor decode_step(const Transformer& model, DecodeBuffers& buffers, int64_t visible);

}  // namespace crucible::lm
