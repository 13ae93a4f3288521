#pragma once
// MXFP4 codes placed into bfloat16 pairs in few integer instructions, for the expert kernels' decoders. Plain C++ on
// the host (tests check every code at every place against the format's table) and the same code on the device.
//
// An e2m1 code s e1 e0 m becomes the bfloat16 with sign s, exponent field e1 e0 (its two low bits) and mantissa
// m 0 0 0 0 0 0: that is the code's value times 2^-126 exactly, the codes 0.5 and 0 included (bfloat16's subnormals
// follow e2m1's). A pair of codes is then a 32-bit word with its low code's bits at 6, 7, 8 (m, e0, e1) and 15 (s),
// and its high code's 16 higher.
//
// The kernels read codes in a paired order: each 4 bytes hold the same 8 codes as stored (code 2j + h in nibble
// 2j + h, the low nibble of each byte first), their bits moved once at load so that pair j (codes 2j and 2j + 1)
// is placed by a shift, a mask or a multiplication:
//   pair 0 where it is placed (a mask);
//   pair 1 three bits below (a shift, a mask);
//   pair 2 with its magnitudes six bits below and its signs one below (a mask, one multiplication by 2^6 + 2^1 that
//     copies every bit to both places without overlap, a mask);
//   pair 3 with its magnitudes three bits above and its signs two above (a shift down by 3, then as pair 2 with
//     2^0 + 2^5).
// Per word of 8 codes that is 10 integer instructions, against 15 from the stored order (a byte permute, a
// multiplication and a mask a pair, 3 more on the word): the decoding's integer instructions bound the experts'
// kernel where few tokens share an expert (docs/benchmarks.md, gpt-oss decode).
#include <cstdint>

#include "lm/host_device.h"

namespace crucible::lm::kernels {

// Where bit b (0 m, 1 e0, 2 e1, 3 s) of pair j's low code lies in a paired word; its high code's lies 16 higher.
constexpr int kPairedBit[4][4] = {{6, 7, 8, 15}, {3, 4, 5, 12}, {0, 1, 2, 14}, {9, 10, 11, 13}};

// Bit `stored` of a stored word (code stored / 4, bit stored % 4 of it): its place in the paired word.
constexpr int paired_bit(int stored) {
  const int code = stored / 4;
  return kPairedBit[code / 2][stored % 4] + 16 * (code % 2);
}

// Bit `paired` of a paired word: its place in the stored word (the inverse of paired_bit).
constexpr int stored_bit(int paired) {
  for (int bit = 0; bit < 32; ++bit)
    if (paired_bit(bit) == paired) return bit;
  return -1;
}

// A word with bit i moved to place(i) (host: loading and tests).
template <typename Place>
uint32_t bits_placed(uint32_t word, Place place) {
  uint32_t placed = 0;
  for (int bit = 0; bit < 32; ++bit) placed |= ((word >> bit) & 1u) << place(bit);
  return placed;
}

// A stored word of 8 codes in the paired order, and back.
inline uint32_t paired_word(uint32_t stored) { return bits_placed(stored, paired_bit); }
inline uint32_t stored_word(uint32_t paired) { return bits_placed(paired, stored_bit); }

// 2^126 in both halves of a bfloat16 pair: a placed pair times this is the codes' values.
constexpr uint32_t kPlacedToValues = 0x7E807E80u;

// The 4 pairs of a paired word (codes 2j and 2j + 1 in pair j, the low code in the low half), each value times
// 2^-126 (see above).
CRUCIBLE_HOST_DEVICE inline void placed_pairs(uint32_t word, uint32_t (&pair)[4]) {
  constexpr uint32_t kPlaced = 0x81C081C0u;  // bits 6-8 and 15 of each half
  pair[0] = word & kPlaced;
  pair[1] = (word << 3) & kPlaced;
  // Bits 0-2 and 14 of each half, copied 6 and 1 up: 6-8 (kept), 20 (dropped); 1-3 (dropped), 15 (kept). The copies
  // share no bit, so the sum carries nowhere.
  pair[2] = ((word & 0x40074007u) * 0x42u) & kPlaced;
  // Bits 9-11 and 13 of each half, 3 down: 6-8 and 10, copied 0 and 5 up: 6-8 (kept), 10 (dropped); 11-13 (dropped),
  // 15 (kept).
  pair[3] = (((word >> 3) & 0x05C005C0u) * 0x21u) & kPlaced;
}

}  // namespace crucible::lm::kernels
