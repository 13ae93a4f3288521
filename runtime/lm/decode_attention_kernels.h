#pragma once
// The decode attention kernels' launch, in plain CUDA types (the .cu file does not see LibTorch).
#include <cuda_runtime.h>

#include <cstdint>

namespace crucible::lm::kernels {

enum class Element { f32, bf16, f16 };

struct DecodeAttentionArgs {
  const void* q = nullptr;  // element (b, h, d) at q + b * q_row_stride + h * q_head_stride + d
  int64_t q_row_stride = 0, q_head_stride = 0;
  const void* k = nullptr;  // [B, Hkv, capacity, D]
  const void* v = nullptr;
  const bool* key_valid = nullptr;  // [B, capacity]
  const int64_t* slot = nullptr;    // [1]
  float* partial = nullptr;         // [B * H, splits, D + 2] workspace
  void* out = nullptr;              // [B, H, D]
  int batch = 0, heads = 0, kv_heads = 0, capacity = 0, head_dim = 0;
  int chunk = 0;  // cache slots per split
  float scale = 1.0f;
  Element element = Element::f32;
};

inline int decode_attention_splits(const DecodeAttentionArgs& a) { return (a.capacity + a.chunk - 1) / a.chunk; }

// False when the shape is outside what the kernels handle (head_dim over 256, query heads not a multiple of key
// heads), or on a launch error.
bool launch_decode_attention(const DecodeAttentionArgs& a, cudaStream_t stream);

}  // namespace crucible::lm::kernels
