#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdlib>
#include <string>

#include "lm/decode_attention.h"
#include "lm/decode_attention_kernels.h"

namespace crucible::lm {
namespace {

// Cache slots per split: small enough that a batch-1 step spreads over many blocks, large enough that the combine
// stays short.
constexpr int kChunk = 64;

}  // namespace

bool decode_attention_serves(const at::TensorOptions& options, int64_t head_dim) {
  // CRUCIBLE_DECODE_ATTENTION=0 keeps LibTorch's attention in decode steps, for comparison.
  static const bool off = [] {
    const char* value = std::getenv("CRUCIBLE_DECODE_ATTENTION");
    return value && std::string(value) == "0";
  }();
  if (off || !options.device().is_cuda() || head_dim <= 0 || head_dim > 256) return false;
  const auto t = options.dtype().toScalarType();
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& key_valid, const at::Tensor& slot, double scale) {
  TORCH_CHECK(decode_attention_serves(q.options(), q.size(-1)) && q.dim() == 4 && q.size(1) == 1 && q.stride(3) == 1,
              "decode_attention: unsupported query");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && key_valid.is_contiguous(),
              "decode_attention: the cache and key_valid must be contiguous");
  TORCH_CHECK(k_cache.scalar_type() == q.scalar_type() && v_cache.scalar_type() == q.scalar_type() &&
                  key_valid.scalar_type() == at::kBool && slot.scalar_type() == at::kLong,
              "decode_attention: dtypes");
  kernels::DecodeAttentionArgs a;
  a.batch = static_cast<int>(q.size(0));
  a.heads = static_cast<int>(q.size(2));
  a.head_dim = static_cast<int>(q.size(3));
  a.kv_heads = static_cast<int>(k_cache.size(1));
  a.capacity = static_cast<int>(k_cache.size(2));
  a.chunk = kChunk;
  a.scale = static_cast<float>(scale);
  a.element = q.scalar_type() == at::kFloat      ? kernels::Element::f32
              : q.scalar_type() == at::kBFloat16 ? kernels::Element::bf16
                                                 : kernels::Element::f16;
  a.q = q.data_ptr();
  a.q_row_stride = q.stride(0);
  a.q_head_stride = q.stride(2);
  a.k = k_cache.data_ptr();
  a.v = v_cache.data_ptr();
  a.key_valid = key_valid.data_ptr<bool>();
  a.slot = slot.data_ptr<int64_t>();
  auto partial = at::empty({a.batch * a.heads, kernels::decode_attention_splits(a), a.head_dim + 2},
                           q.options().dtype(at::kFloat));
  auto out = at::empty({a.batch, 1, a.heads * a.head_dim}, q.options());
  a.partial = partial.data_ptr<float>();
  a.out = out.data_ptr();
  TORCH_CHECK(kernels::launch_decode_attention(a, c10::cuda::getCurrentCUDAStream(q.get_device()).stream()),
              "decode_attention: launch failed");
  return out;
}

}  // namespace crucible::lm
