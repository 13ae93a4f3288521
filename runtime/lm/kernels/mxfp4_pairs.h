#pragma once
// MXFP4 codes placed into bfloat16 pairs with few integer instructions, for the expert kernels' decoders. Plain C++
// on the host (tests check every byte against the format's table) and the same code on the device.
//
// An e2m1 code s e1 e0 m becomes the bfloat16 with sign s, exponent field e1 e0 (its two low bits) and mantissa
// m 0 0 0 0 0 0: that is the code's value times 2^-126 exactly, the codes 0.5 and 0 included (bfloat16's subnormals
// follow e2m1's). Byte i of a 32-bit word of codes gives pair i: the low nibble (code 2i) in the low half, the high
// nibble in the high half. The byte's magnitude and sign bits are moved into place by two multiplications (each a
// sum of two shifted copies that never overlap the bits kept), so a pair costs two byte permutes, one multiply-add
// pair and one mask: the GPU's integer pipe, which the decoding saturates, does about two thirds of the work of a
// table lookup with separate sign handling.
#include <cstdint>

#include "lm/host_device.h"

namespace crucible::lm::kernels {

// PTX prmt.b32 in its default mode: byte k of the result is byte (selector nibble k & 7) of b:a, or that byte's
// sign replicated when the nibble's bit 3 is set.
CRUCIBLE_HOST_DEVICE inline uint32_t byte_permute(uint32_t a, uint32_t b, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
#else
  const uint64_t bytes = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t d = 0;
  for (int k = 0; k < 4; ++k) {
    const uint32_t nibble = (selector >> (4 * k)) & 0xFu;
    uint32_t byte = static_cast<uint32_t>(bytes >> (8 * (nibble & 7u))) & 0xFFu;
    if (nibble & 8u) byte = byte & 0x80u ? 0xFFu : 0u;
    d |= byte << (8 * k);
  }
  return d;
#endif
}

// 2^126 in both halves of a bfloat16 pair: a placed pair times this is the codes' values.
constexpr uint32_t kPlacedToValues = 0x7E807E80u;

// The 4 pairs of a word of codes, each value times 2^-126 (see above).
CRUCIBLE_HOST_DEVICE inline void placed_pairs(uint32_t word, uint32_t (&pair)[4]) {
  const uint32_t magnitudes = word & 0x77777777u, signs = word & 0x88888888u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t only_byte_i = 0x4440u + static_cast<uint32_t>(i);  // byte i, then three zero bytes of b = 0
    const uint32_t m = byte_permute(magnitudes, 0u, only_byte_i), s = byte_permute(signs, 0u, only_byte_i);
    // m << 6 puts the low code's magnitude at bits 6-8, m << 18 the high code's at 22-24; s << 12 the low sign at
    // 15, s << 24 the high sign at 31. The other copies land at bits 10-12, 18-21 and 27, which the mask drops
    // (18-21 holds at most 7 << 18 plus 2 << 18: nothing carries into 22).
    pair[i] = (s * 0x01001000u + m * 0x00040040u) & 0x81C081C0u;
  }
}

}  // namespace crucible::lm::kernels
