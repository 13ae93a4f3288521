// MXFP4 packing and decoding against the format's definition: the e2m1 table, the low nibble first, the scale byte
// an exponent biased by 127.
#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "lm/kernels/mxfp4_pairs.h"
#include "lm/model/moe.h"
#include "lm/model/mxfp4.h"

using namespace crucible::lm;

namespace {

// One block from explicit bytes (each holds two codes, the low nibble first), the rest zero.
at::Tensor block_of(std::initializer_list<uint8_t> bytes) {
  std::vector<uint8_t> b(bytes);
  b.resize(16, 0);
  return at::tensor(at::ArrayRef<uint8_t>(b.data(), b.size()), at::kByte).view({1, 16});
}

// A scalar decoder from the definition, for comparison: ldexp(table[nibble], scale - 127).
std::vector<float> decode_by_hand(const at::Tensor& blocks, const at::Tensor& scales) {
  std::vector<float> out;
  const auto b = blocks.contiguous().view({-1, 16});
  const auto s = scales.contiguous().view({-1});
  for (int64_t i = 0; i < b.size(0); ++i)
    for (int64_t j = 0; j < 16; ++j) {
      const auto byte = b[i][j].item<uint8_t>();
      const int exponent = s[i].item<uint8_t>() - 127;
      out.push_back(std::ldexp(kMxfp4Values[byte & 0x0F], exponent));
      out.push_back(std::ldexp(kMxfp4Values[byte >> 4], exponent));
    }
  return out;
}

std::vector<float> as_vector(const at::Tensor& t) {
  const auto c = t.contiguous().to(at::kFloat).view({-1});
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

}  // namespace

TEST_CASE("mxfp4: decoding follows the table, the low nibble first and the biased exponent") {
  // Byte 0x72: low nibble 2 (1.0) then high nibble 7 (6.0); byte 0x9F: -6.0 then -0.5. Scale 128: times 2.
  const auto blocks = block_of({0x72, 0x9F, 0x08});
  const auto scales = at::full({1}, 128, at::kByte);
  const auto values = as_vector(mxfp4_decode(blocks, scales, at::kFloat));
  REQUIRE(values.size() == 32);
  CHECK(values[0] == 2.0f);
  CHECK(values[1] == 12.0f);
  CHECK(values[2] == -12.0f);
  CHECK(values[3] == -1.0f);
  CHECK(values[4] == 0.0f);
  CHECK(std::signbit(values[4]));  // byte 0x08's low nibble: code 8 is -0
  CHECK(!std::signbit(values[5]));
  CHECK(values[31] == 0.0f);
  // Scale 127 is 2^0, 120 is 2^-7; every code at several scales, against the hand decoder.
  std::vector<uint8_t> all(16);
  for (int i = 0; i < 16; ++i) all[i] = static_cast<uint8_t>(((2 * i) & 15) | (((2 * i + 1) & 15) << 4));
  const auto every = at::tensor(at::ArrayRef<uint8_t>(all.data(), 16), at::kByte).view({1, 16}).repeat({3, 1});
  const auto three = at::tensor(std::vector<int64_t>{127, 120, 140}).to(at::kByte);
  CHECK(as_vector(mxfp4_decode(every, three, at::kFloat)) == decode_by_hand(every, three));
  CHECK(as_vector(mxfp4_decode(every, three, at::kBFloat16)) == decode_by_hand(every, three));
}

TEST_CASE("mxfp4: values a block can hold pack and decode exactly, through any leading shape") {
  auto g = at::detail::createCPUGenerator(3);
  const auto lut = at::tensor(std::vector<float>(kMxfp4Values.begin(), kMxfp4Values.end()));
  auto codes = at::randint(0, 16, {2, 3, 64}, g, at::kLong);
  codes.select(-1, 0).fill_(7);  // each block's first value is +6 (or its largest magnitude is)
  codes.select(-1, 32).fill_(15);
  const auto exponents = at::randint(-20, 20, {2, 3, 2}, g, at::kLong).to(at::kFloat);
  const auto values = lut.index({codes}) * at::exp2(exponents).repeat_interleave(32, -1);
  const auto packed = mxfp4_encode(values);
  CHECK(packed.blocks.sizes().vec() == std::vector<int64_t>{2, 3, 2, 16});
  CHECK(packed.scales.sizes().vec() == std::vector<int64_t>{2, 3, 2});
  CHECK(at::equal(mxfp4_decode(packed.blocks, packed.scales, at::kFloat), values));
  CHECK(as_vector(values) == decode_by_hand(packed.blocks, packed.scales));
}

TEST_CASE("mxfp4: other values round to the nearest code, ties to the even one, and saturate at 6") {
  struct Row {
    float in, out;
  };
  // Largest magnitude 4 in each block: scale 2^0, so codes are the table's values.
  const Row rows[] = {{0.2f, 0.0f}, {0.25f, 0.0f}, {0.3f, 0.5f}, {1.25f, 1.0f}, {1.3f, 1.5f}, {2.5f, 2.0f},
                      {3.5f, 4.0f}, {5.0f, 4.0f},  {5.1f, 6.0f}, {-2.6f, -3.0f}, {-0.75f, -1.0f}};
  for (const auto& r : rows) {
    CAPTURE(r.in);
    auto v = at::zeros({32});
    v[0] = 4.0f;
    v[1] = r.in;
    CHECK(mxfp4_decode(mxfp4_encode(v).blocks, mxfp4_encode(v).scales, at::kFloat)[1].item<float>() == r.out);
  }
  // 7.9 sets the scale to 2^0 (floor(log2 7.9) - 2 = 0) and saturates to 6; a zero block decodes to zeros.
  auto v = at::zeros({64});
  v[0] = 7.9f;
  const auto p = mxfp4_encode(v);
  const auto back = mxfp4_decode(p.blocks, p.scales, at::kFloat);
  CHECK(back[0].item<float>() == 6.0f);
  CHECK(back.narrow(0, 32, 32).abs().max().item<float>() == 0.0f);
  CHECK_THROWS_AS(mxfp4_encode(at::zeros({31})), std::invalid_argument);
  CHECK_THROWS_AS(mxfp4_decode(p.blocks, p.scales.narrow(0, 0, 1), at::kFloat), std::invalid_argument);
}

TEST_CASE("mxfp4: the GPU decoder's placed bfloat16 pairs of paired words are every code's value times 2^-126") {
  using crucible::lm::kernels::paired_word;
  using crucible::lm::kernels::placed_pairs;
  // bfloat16 bits as the float32 they are the high half of (bfloat16 subnormals are float32 subnormals).
  const auto as_float = [](uint32_t half) {
    const uint32_t bits = (half & 0xFFFFu) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  };
  // Every code at every place of a stored word, the other codes all 0, all 15 or a mixed pattern: pair j holds stored
  // nibble 2j, then nibble 2j + 1, signed zeros included, and nothing of the other codes.
  int compared = 0, wrong = 0;
  for (const uint32_t others : {0x00000000u, 0xFFFFFFFFu, 0x7A3C95E1u})
    for (int place = 0; place < 8; ++place)
      for (uint32_t code = 0; code < 16; ++code) {
        const uint32_t word = (others & ~(0xFu << (4 * place))) | code << (4 * place);
        uint32_t pairs[4];
        placed_pairs(paired_word(word), pairs);
        for (int j = 0; j < 4; ++j)
          for (int h = 0; h < 2; ++h) {
            const uint32_t nibble = (word >> (4 * (2 * j + h))) & 0xFu;
            const float value = std::ldexp(as_float(pairs[j] >> (16 * h)), 126);
            ++compared;
            if (value != kMxfp4Values[nibble] || std::signbit(value) != std::signbit(kMxfp4Values[nibble]))
              if (++wrong <= 3) MESSAGE("word " << word << ", pair " << j << ", code " << nibble << ": " << value);
          }
      }
  CHECK(compared == 3 * 8 * 16 * 8);
  CHECK(wrong == 0);
}

TEST_CASE("mxfp4: the paired order moves every bit of a word once, on tensors as on words, and decodes the same") {
  using crucible::lm::kernels::paired_word;
  using crucible::lm::kernels::stored_word;
  uint32_t reached = 0;
  for (int bit = 0; bit < 32; ++bit) {
    CAPTURE(bit);
    CHECK(stored_word(paired_word(1u << bit)) == 1u << bit);
    reached |= paired_word(1u << bit);
  }
  CHECK(reached == 0xFFFFFFFFu);  // a permutation
  // Random bytes (every bit pattern of the sign bits included), as blocks [3, 5, 16]: the tensors' order changed by
  // shifts and masks on int32 words equals the words' own, both ways, and decodes to the same values.
  auto g = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto stored = at::randint(256, {3, 5, 16}, g, at::kInt).to(at::kByte);
  const auto paired = mxfp4_paired(stored);
  const auto words = stored.view(at::kInt).flatten(), paired_words = paired.view(at::kInt).flatten();
  int differing = 0;
  for (int64_t i = 0; i < words.numel(); ++i)
    differing += paired_word(static_cast<uint32_t>(words[i].item<int32_t>())) !=
                 static_cast<uint32_t>(paired_words[i].item<int32_t>());
  CHECK(differing == 0);
  CHECK(!at::equal(paired, stored));
  CHECK(at::equal(mxfp4_stored(paired), stored));
  CHECK(at::equal(mxfp4_stored(mxfp4_paired(stored.transpose(0, 1))), stored.transpose(0, 1)));
  const auto scales = at::randint(100, 150, {3, 5}, g, at::kInt).to(at::kByte);
  CHECK(at::equal(mxfp4_decode(paired, scales, at::kFloat, CodeOrder::paired), mxfp4_decode(stored, scales, at::kFloat)));
  // Blocks starting at any byte of their storage (a view one byte in) are reordered too.
  const auto one_byte_in = at::cat({at::zeros({1}, at::kByte), stored.flatten()}).narrow(0, 1, stored.numel()).view({3, 5, 16});
  CHECK(at::equal(mxfp4_paired(one_byte_in), paired));
  CHECK_THROWS_AS(mxfp4_paired(at::zeros({3, 8}, at::kByte)), std::invalid_argument);
}

TEST_CASE("moe: routing keeps the top k and softmaxes their logits; the SwiGLU clamps and interleaves") {
  const auto logits = at::tensor(std::vector<float>{0.5f, 3.0f, -1.0f, 2.0f}).view({1, 4});
  const auto r = route_tokens(logits, 2);
  CHECK(r.experts[0][0].item<int64_t>() == 1);
  CHECK(r.experts[0][1].item<int64_t>() == 3);
  CHECK(r.weights[0][0].item<float>() == doctest::Approx(1 / (1 + std::exp(-1.0))));
  // Columns: gate 10 (clamped to 7), linear -9 (clamped to -7); gate -2, linear 0.5.
  const auto gu = at::tensor(std::vector<float>{10, -9, -2, 0.5f}).view({1, 4});
  const auto out = clamped_swiglu(gu, MoeConfig{4, 2, 7.0, 1.702});
  const auto silu = [](double g) { return g / (1 + std::exp(-1.702 * g)); };
  CHECK(out[0][0].item<float>() == doctest::Approx((-7 + 1) * silu(7)));
  CHECK(out[0][1].item<float>() == doctest::Approx((0.5 + 1) * silu(-2)));
}
