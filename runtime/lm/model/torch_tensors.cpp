#include "lm/model/torch_tensors.h"

#include <ATen/ATen.h>

#include <cstring>

namespace crucible::lm {
namespace {

struct Pairing {
  DType dtype;
  at::ScalarType scalar;
};

constexpr Pairing kPairs[] = {
    {DType::f32, at::kFloat}, {DType::f16, at::kHalf}, {DType::bf16, at::kBFloat16}, {DType::f64, at::kDouble},
    {DType::i64, at::kLong},  {DType::i32, at::kInt},  {DType::i16, at::kShort},     {DType::i8, at::kChar},
    {DType::u8, at::kByte},   {DType::boolean, at::kBool},
};

}  // namespace

at::Tensor view_to_tensor(const TensorView& view) {
  for (const auto& p : kPairs)
    if (p.dtype == view.dtype)
      return at::from_blob(const_cast<std::byte*>(view.data), view.shape, at::TensorOptions().dtype(p.scalar));
  throw ModelFormatError("tensor " + view.name + ": no LibTorch type for " + dtype_name(view.dtype));
}

TensorBytes tensor_to_bytes(const std::string& name, const at::Tensor& tensor) {
  for (const auto& p : kPairs) {
    if (p.scalar != tensor.scalar_type()) continue;
    const auto host = tensor.detach().to(at::kCPU).contiguous();
    TensorBytes out{name, p.dtype, host.sizes().vec(), std::vector<std::byte>(host.nbytes())};
    std::memcpy(out.bytes.data(), host.data_ptr(), host.nbytes());
    return out;
  }
  throw ModelFormatError("tensor " + name + ": its type has no safetensors dtype");
}

}  // namespace crucible::lm
