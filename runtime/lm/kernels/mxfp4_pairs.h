#pragma once
// MXFP4 codes placed into bfloat16 pairs with few integer instructions, for the expert kernels' decoders. Plain C++
// on the host (tests check every byte against the format's table) and the same code on the device.
//
// An e2m1 code s e1 e0 m becomes the bfloat16 with sign s, exponent field e1 e0 (its two low bits) and mantissa
// m 0 0 0 0 0 0: that is the code's value times 2^-126 exactly, the codes 0.5 and 0 included (bfloat16's subnormals
// follow e2m1's). Byte i of a 32-bit word of codes gives pair i: the low nibble (code 2i) in the low half, the high
// nibble in the high half. One byte permute puts byte i's magnitude bits in the low byte of a 16-bit value and its
// sign bits, moved 2 down, in the high byte; one multiplication by 2^6 + 2^18 then moves all four pieces into place
// at once (magnitudes 6 and 18 up, signs 12 and 24 up, and copies elsewhere that never carry into the bits kept), and
// a mask drops the copies. Per word of 8 codes: 3 operations on the word, then a permute, a multiplication and a
// mask a pair: the GPU's integer pipe, which the decoding saturates, does half the work of a table lookup with
// separate sign handling.
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
  // Byte i of `signs` has the low code's sign at bit 1 and the high code's at bit 5.
  const uint32_t magnitudes = word & 0x77777777u, signs = (word >> 2) & 0x22222222u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Byte i of the magnitudes, byte i of the signs, then two zero bytes (the replicated top bit of a magnitude byte).
    const uint32_t selector = 0x8800u | (4u + static_cast<uint32_t>(i)) << 4 | static_cast<uint32_t>(i);
    const uint32_t d = byte_permute(magnitudes, signs, selector);
    // d << 6 puts the low code's magnitude at bits 6-8 and its sign (d's bit 9) at 15; d << 18 the high code's
    // magnitude at 22-24 and its sign (bit 13) at 31. The other copies land at bits 10-12, 18-21 and 27, which the
    // mask drops: 18-21 holds at most 7 << 18 plus the high sign's 2 << 18, so nothing carries into 22.
    pair[i] = (d * 0x00040040u) & 0x81C081C0u;
  }
}

}  // namespace crucible::lm::kernels
