#pragma once
// MXFP4 (OCP microscaling, as gpt-oss stores its experts): blocks of 32 values share one uint8 scale, an exponent
// biased by 127; each value is a 4-bit e2m1 code, two to a byte, the low nibble first. A value decodes as
// ldexp(kMxfp4Values[code], scale - 127).
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>

namespace crucible::lm {

constexpr int64_t kMxfp4BlockSize = 32;  // values per shared scale (16 bytes of codes)
constexpr std::array<float, 16> kMxfp4Values = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                                -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

struct Mxfp4Tensor {
  at::Tensor blocks;  // [..., cols / 32, 16] uint8
  at::Tensor scales;  // [..., cols / 32] uint8
};

// values [..., cols] (cols a multiple of 32, finite) -> blocks and scales. Each block's scale is 2^(floor(log2 of
// its largest magnitude) - 2), so the largest lands in [4, 8) and saturates at 6; every value rounds to the nearest
// code (ties to the even code). A block of zeros gets scale 0. Exact for values that are codes times the scale.
Mxfp4Tensor mxfp4_encode(const at::Tensor& values);

// The order of the 8 codes in each 4 bytes of blocks: as stored (the low nibble of each byte first), or paired, as
// the GPU kernels read them (the same codes, their bits placed so that each pair of codes becomes a bfloat16 pair in
// a few integer instructions: runtime/lm/kernels/mxfp4_pairs.h). A model's experts (ExpertMatrix) hold theirs paired.
enum class CodeOrder { stored, paired };

// blocks [..., 16] uint8 (contiguous or not, any device) in the other order: a new contiguous tensor.
at::Tensor mxfp4_paired(const at::Tensor& stored_blocks);
at::Tensor mxfp4_stored(const at::Tensor& paired_blocks);

// blocks [..., n, 16] and scales [..., n] uint8 -> [..., n * 32] in `dtype` (exact in float32; bfloat16 holds
// every product of a code and a power of two in its range).
at::Tensor mxfp4_decode(const at::Tensor& blocks, const at::Tensor& scales, c10::ScalarType dtype,
                        CodeOrder order = CodeOrder::stored);

}  // namespace crucible::lm
