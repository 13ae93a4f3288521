#include "lm/model/mxfp4.h"

#include <ATen/ATen.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "lm/kernels/moe_kernels.h"
#include "lm/kernels/mxfp4_pairs.h"

namespace crucible::lm {
namespace {

at::Tensor code_values(const at::Device& device) {
  return at::tensor(at::ArrayRef<float>(kMxfp4Values.data(), kMxfp4Values.size()), at::kFloat).to(device);
}

// Every byte's two values, [256, 2] (the low nibble first), on `device` in `dtype` (float32 or bfloat16 hold them
// exactly): made once per device and dtype, so decoding copies nothing from the host.
at::Tensor byte_values(const at::Device& device, c10::ScalarType dtype) {
  static std::mutex mutex;
  // Never destroyed: device memory freed after the CUDA runtime has shut down would fail at exit.
  static auto* made = new std::map<std::pair<std::string, c10::ScalarType>, at::Tensor>;
  std::lock_guard<std::mutex> lock(mutex);
  auto& table = (*made)[{device.str(), dtype}];
  if (!table.defined()) {
    std::vector<float> pairs(512);
    for (int b = 0; b < 256; ++b) {
      pairs[2 * b] = kMxfp4Values[b & 0x0F];
      pairs[2 * b + 1] = kMxfp4Values[b >> 4];
    }
    table = at::tensor(pairs, at::kFloat).view({256, 2}).to(device, dtype);
  }
  return table;
}

// Codes [..., 32] (0..15) as bytes [..., 16]: code 2i in the low nibble of byte i, code 2i + 1 in the high one.
at::Tensor pack_nibbles(const at::Tensor& codes) {
  const auto pairs = codes.to(at::kByte).view({-1, kMxfp4BlockSize / 2, 2});
  return at::bitwise_or(pairs.select(-1, 0), at::bitwise_left_shift(pairs.select(-1, 1), 4));
}

// Each 32-bit word of blocks with its bits moved by `place` (bit i to place(i), a permutation): one shift and mask
// for each distance bits move, on whatever device the blocks are. As int32: a right shift's copies of the sign bit
// land above every bit its mask keeps.
template <typename Place>
at::Tensor bits_moved(const at::Tensor& blocks, Place place) {
  if (blocks.scalar_type() != at::kByte || blocks.dim() < 1 || blocks.size(-1) != kMxfp4BlockSize / 2)
    throw std::invalid_argument("mxfp4 code order: blocks must be [..., 16] uint8");
  std::map<int, uint32_t> masks;  // distance -> the bits that land there
  for (int bit = 0; bit < 32; ++bit) masks[place(bit) - bit] |= 1u << place(bit);
  // Read as int32 words: blocks that start inside a word of their storage are copied first.
  const auto whole = blocks.storage_offset() % 4 == 0 ? blocks.contiguous() : blocks.clone(at::MemoryFormat::Contiguous);
  const auto words = whole.view(at::kInt);
  auto out = at::zeros_like(words);
  for (const auto& [distance, mask] : masks) {
    const auto moved = distance >= 0 ? at::bitwise_left_shift(words, distance) : at::bitwise_right_shift(words, -distance);
    out.bitwise_or_(moved.bitwise_and_(static_cast<int32_t>(mask)));
  }
  return out.view(at::kByte);
}

}  // namespace

at::Tensor mxfp4_paired(const at::Tensor& stored_blocks) { return bits_moved(stored_blocks, kernels::paired_bit); }

at::Tensor mxfp4_stored(const at::Tensor& paired_blocks) { return bits_moved(paired_blocks, kernels::stored_bit); }

Mxfp4Tensor mxfp4_encode(const at::Tensor& values) {
  const int64_t cols = values.size(-1);
  if (cols % kMxfp4BlockSize != 0) throw std::invalid_argument("mxfp4_encode: the last dimension is not a multiple of 32");
  auto shape = values.sizes().vec();
  const auto v = values.to(at::kFloat).reshape({-1, kMxfp4BlockSize});  // one row per block
  const auto amax = v.abs().amax(-1, /*keepdim=*/true);
  // The shared exponent: floor(log2(amax)) - 2 (e2m1's largest exponent), within the scale byte's range.
  auto exponent = (at::floor(at::log2(amax)) - 2).clamp(-127, 127);
  exponent = at::where(amax > 0, exponent, at::full_like(exponent, -127));
  const auto scaled = v / at::exp2(exponent);
  // The nearest of the 8 magnitudes, the sign bit apart; of two equally near, the even code (round half to even).
  const auto magnitudes = code_values(values.device()).narrow(0, 0, 8);
  const auto distance = (scaled.abs().unsqueeze(-1) - magnitudes).abs();
  const auto farther = distance > distance.amin(-1, /*keepdim=*/true);
  const auto odd = at::arange(8, values.options().dtype(at::kLong)).remainder(2);
  const auto nearest = (farther.to(at::kLong) * 2 + odd).argmin(-1);  // 0..7
  const auto negative = at::signbit(scaled) & (nearest > 0);
  const auto codes = nearest + negative.to(at::kLong) * 8;
  shape.back() = cols / kMxfp4BlockSize;
  auto block_shape = shape;
  block_shape.push_back(kMxfp4BlockSize / 2);
  return {pack_nibbles(codes).view(block_shape), (exponent + 127).to(at::kByte).view(shape)};
}

at::Tensor mxfp4_decode(const at::Tensor& blocks, const at::Tensor& scales, c10::ScalarType dtype, CodeOrder order) {
  if (blocks.scalar_type() != at::kByte || scales.scalar_type() != at::kByte)
    throw std::invalid_argument("mxfp4_decode: blocks and scales must be uint8");
  if (blocks.dim() < 2 || blocks.size(-1) != kMxfp4BlockSize / 2 || blocks.sizes().slice(0, blocks.dim() - 1).vec() != scales.sizes().vec())
    throw std::invalid_argument("mxfp4_decode: blocks and scales must be [..., n, 16] and [..., n]");
  if (mxfp4_decode_serves(blocks, scales, dtype))
    return mxfp4_decode_on_device(order == CodeOrder::paired ? blocks : mxfp4_paired(blocks), scales, dtype);
  const auto stored = order == CodeOrder::stored ? blocks : mxfp4_stored(blocks);
  // float16 cannot hold every scale (2^-127 to 2^127), though it holds many products: computed in float32.
  const auto compute = dtype == at::kHalf ? at::kFloat : dtype;
  auto values = byte_values(blocks.device(), compute).index_select(0, stored.reshape({-1}).to(at::kInt));
  auto shape = stored.sizes().vec();
  shape.back() = kMxfp4BlockSize;  // [..., n, 32]: byte i's two values at 2i and 2i + 1
  values = values.view(shape) * at::exp2(scales.to(at::kFloat) - 127).to(compute).unsqueeze(-1);  // exact: a power of two
  auto out_shape = scales.sizes().vec();
  out_shape.back() *= kMxfp4BlockSize;
  return values.view(out_shape).to(dtype);
}

}  // namespace crucible::lm
