// The language model on a GPU: the same fixtures as the CPU golden tests, in float32 and bfloat16, and CUDA-graph
// decoding against eager decoding.
#include <ATen/ATen.h>
#include <torch/version.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <doctest/doctest.h>

#include <utility>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

#include "crucible/eval/evaluator.h"
#include "lm/kernels/decode_kernels.h"
#include "lm/generation/generator.h"
#include "lm/model/lora.h"
#include "lm/golden_outputs.h"
#include "lm/model/rotary.h"
#include "lm/generation/sampling_params.h"
#include "lm/model/transformer.h"

using namespace crucible;
using namespace crucible::lm;

namespace {

using test::golden;

Transformer on_gpu(const std::string& fixture, c10::ScalarType dtype) {
  LoadOptions o;
  o.device = c10::Device("cuda:0");
  o.dtype = dtype;
  return Transformer::load(test::lm_fixture(fixture), o);
}

GenerationRequest request(std::vector<int64_t> prompt, double temperature, uint64_t seed, int64_t n = 24) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.top_p = 0.95;
  r.max_new_tokens = n;
  return r;
}

TokenBytes no_text() {
  return [](int64_t) { return std::string(); };
}

// Switches a kernel off for its scope (where `off`), and back on at its end (also when a check throws).
class SwitchedOff {
 public:
  explicit SwitchedOff(void (*set)(bool), bool off = true) : set_(off ? set : nullptr) {
    if (set_) set_(false);
  }
  ~SwitchedOff() {
    if (set_) set_(true);
  }
  SwitchedOff(const SwitchedOff&) = delete;
  SwitchedOff& operator=(const SwitchedOff&) = delete;

 private:
  void (*set_)(bool);
};

// Decodes `batch` with a kernel switched on, then off (a new Generator captures its graphs anew), and checks the same
// tokens and log-probs within `epsilon` (0: the same bits).
void same_decoding_without(const Transformer& model, const std::vector<GenerationRequest>& batch, void (*set)(bool),
                           double epsilon) {
  Generator with(model, no_text());
  const auto on = with.generate(batch);
  std::vector<Completion> off;
  {
    const SwitchedOff switched(set);
    Generator without(model, no_text());
    off = without.generate(batch);
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    CAPTURE(i);
    CHECK(on[i].tokens == off[i].tokens);
    for (std::size_t t = 0; t < on[i].tokens.size() && t < off[i].tokens.size(); ++t) {
      if (epsilon == 0)
        CHECK(on[i].model_logprobs[t] == off[i].model_logprobs[t]);
      else
        CHECK(on[i].model_logprobs[t] == doctest::Approx(off[i].model_logprobs[t]).epsilon(epsilon));
    }
  }
}

}  // namespace

TEST_CASE("lm gpu: float32 logits on CUDA match transformers' within 1e-3, greedy identical") {
  c10::InferenceMode guard;
  for (const auto* fixture : test::kLmFixtures) {
    CAPTURE(fixture);
    const auto model = on_gpu(fixture, at::kFloat);
    const auto g = golden(fixture);
    for (std::size_t i = 0; i < g.prompts.size(); ++i) {
      const auto tokens = at::tensor(g.prompts[i], at::kLong).view({1, -1});
      const auto logits = model.forward_full(tokens)[0].cpu();
      CHECK((logits - g.logits[i]).abs().max().item<float>() < 1e-3f);
    }
    Generator generator(model, no_text());
    std::vector<GenerationRequest> batch;
    for (const auto& p : g.prompts) batch.push_back(request(p, 0, 0));
    const auto out = generator.generate(batch);
    for (std::size_t i = 0; i < g.prompts.size(); ++i) CHECK(out[i].tokens == g.greedy[i]);
  }
}

TEST_CASE("lm gpu: right-padded whole sequences through the fused causal kernel agree with the mask at valid tokens") {
  c10::InferenceMode guard;
  const auto* fixture = test::kLmFixtures[0];
  const auto g = golden(fixture);
  int64_t T = 0;
  for (const auto& p : g.prompts) T = std::max<int64_t>(T, static_cast<int64_t>(p.size()));
  const int64_t B = static_cast<int64_t>(g.prompts.size()) + 1;
  auto tokens = at::zeros({B, T}, at::kLong);
  auto valid = at::zeros({B, T}, at::kBool);
  for (int64_t b = 0; b < B; ++b) {  // the last row repeats the first, cut short: right padding
    const auto& p = g.prompts[b < B - 1 ? b : 0];
    const int64_t n = b < B - 1 ? static_cast<int64_t>(p.size()) : std::max<int64_t>(1, static_cast<int64_t>(p.size()) / 2);
    for (int64_t t = 0; t < n; ++t) tokens[b][t] = p[t], valid[b][t] = true;
  }
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    const auto model = on_gpu(fixture, dtype);
    model.reserve_positions(T);
    const auto on = valid.to(model.options().device);
    auto fused = whole_sequences(on);
    REQUIRE(fused.causal_prefix);
    auto masked = fused;
    masked.causal_prefix = false;
    auto fused_cache = model.make_cache(B, T), masked_cache = model.make_cache(B, T);
    const auto a = model.hidden_states(tokens.to(on.device()), fused, fused_cache).to(at::kFloat);
    const auto b = model.hidden_states(tokens.to(on.device()), masked, masked_cache).to(at::kFloat);
    const auto keep = on.unsqueeze(-1);
    const float scale = (b * keep).abs().max().item<float>();
    const float tolerance = dtype == at::kFloat ? 1e-4f : 0.02f;
    CHECK(((a - b) * keep).abs().max().item<float>() <= tolerance * scale);
  }
}

TEST_CASE("lm gpu: bfloat16 stays close to the float32 reference") {
  c10::InferenceMode guard;
  for (const auto* fixture : test::kLmFixtures) {
    CAPTURE(fixture);
    const auto model = on_gpu(fixture, at::kBFloat16);
    const auto g = golden(fixture);
    int64_t agree = 0, total = 0;
    for (std::size_t i = 0; i < g.prompts.size(); ++i) {
      const auto tokens = at::tensor(g.prompts[i], at::kLong).view({1, -1});
      const auto logits = model.forward_full(tokens)[0].cpu();
      const auto scale = g.logits[i].abs().max().item<float>();
      CHECK((logits - g.logits[i]).abs().max().item<float>() < 0.05f * scale);
      agree += (logits.argmax(-1) == g.logits[i].argmax(-1)).sum().item<int64_t>();
      total += logits.size(0);
    }
    CHECK(agree >= total * 9 / 10);
  }
}

TEST_CASE("lm gpu: CUDA-graph decoding gives what eager decoding gives, and seeds reproduce") {
  const auto model = on_gpu("llama_tiny", at::kFloat);
  const auto g = golden("llama_tiny");
  GeneratorOptions eager_options;
  eager_options.cuda_graphs = false;
  Generator graphs(model, no_text()), eager(model, no_text(), eager_options);
  std::vector<GenerationRequest> batch;
  for (uint64_t i = 0; i < g.prompts.size(); ++i) batch.push_back(request(g.prompts[i], 0.8, 100 + i, 40));
  const auto a = graphs.generate(batch);
  const auto b = eager.generate(batch);
  const auto again = graphs.generate(batch);  // reuses the captured graph
  for (std::size_t i = 0; i < batch.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i].tokens == b[i].tokens);
    CHECK(again[i].tokens == a[i].tokens);
    for (std::size_t t = 0; t < a[i].tokens.size() && t < b[i].tokens.size(); ++t)
      CHECK(a[i].model_logprobs[t] == doctest::Approx(b[i].model_logprobs[t]).epsilon(1e-3));
  }
  // A different shape captures anew and still matches greedy transformers.
  const auto single = graphs.generate({request(g.prompts[2], 0, 0)});
  CHECK(single[0].tokens == g.greedy[2]);
}

TEST_CASE("lm gpu: a CUDA graph follows the adapter: switched on, updated in place, switched off") {
  auto model = on_gpu("qwen2_tiny", at::kFloat);
  const auto g = golden("qwen2_tiny");
  LoraConfig config;
  config.rank = 4;
  auto adapter = LoraAdapter::create(model.config(), config, c10::Device("cuda:0"), at::kFloat, 3);
  GeneratorOptions eager_options;
  eager_options.cuda_graphs = false;
  Generator graphs(model, no_text()), eager(model, no_text(), eager_options);
  const std::vector<GenerationRequest> batch = {request(g.prompts[2], 0, 0), request(g.prompts[3], 0, 0)};
  const auto base = graphs.generate(batch);  // captured without an adapter
  CHECK(base[0].tokens == g.greedy[2]);
  model.use_adapter(&adapter);
  {
    at::NoGradGuard no_grad;
    for (auto& p : adapter.parameters()) p.normal_(0, 0.2);
  }
  const auto adapted = graphs.generate(batch);
  const auto adapted_eager = eager.generate(batch);
  CHECK(adapted[0].tokens != g.greedy[2]);
  for (std::size_t i = 0; i < batch.size(); ++i) CHECK(adapted[i].tokens == adapted_eager[i].tokens);
  {
    at::NoGradGuard no_grad;
    for (auto& p : adapter.parameters()) p.mul_(0.5);  // an optimizer-like in-place update
  }
  const auto updated = graphs.generate(batch);
  const auto updated_eager = eager.generate(batch);
  for (std::size_t i = 0; i < batch.size(); ++i) CHECK(updated[i].tokens == updated_eager[i].tokens);
  adapter.set_enabled(false);
  CHECK(graphs.generate(batch)[0].tokens == g.greedy[2]);
}

TEST_CASE("lm gpu: the fused decode kernels round as LibTorch's separate kernels do, on any of the GPUs") {
  c10::InferenceMode inference;
  // The current device stays cuda:0; with two GPUs or more the kernels also run on the last one (a policy on
  // cuda:1 beside an evaluator on cuda:0).
  const int gpus = crucible::eval::cuda_devices();
  if (gpus < 2) MESSAGE("one GPU: the kernels are not run on a second one");
  for (const int gpu : gpus > 1 ? std::vector<int>{0, gpus - 1} : std::vector<int>{0})
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    CAPTURE(gpu);
    CAPTURE(dtype);
    const auto cuda = at::TensorOptions().device(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(gpu)));
    const int64_t B = 3, H = 4, Hkv = 2, D = 64, capacity = 16, n = 32;
    at::manual_seed(7);
    const auto qkv = at::randn({B, 1, (H + 2 * Hkv) * D}, cuda).to(dtype);
    const auto cos = at::randn({n, D}, cuda).to(dtype), signed_sin = at::randn({n, D}, cuda).to(dtype);
    const auto positions = at::tensor({3, 17, 30}, cuda.dtype(at::kLong)).view({B, 1});
    const auto slots = at::tensor({5}, cuda.dtype(at::kLong));
    auto k = at::zeros({B, Hkv, capacity, D}, cuda.dtype(dtype)), v = at::zeros_like(k);
    auto k_ref = at::zeros_like(k), v_ref = at::zeros_like(k);
    REQUIRE(decode_kernels_serve(qkv));
    const auto q = rotate_into_cache(qkv, positions, slots, cos, signed_sin, k, v, H, Hkv);

    const auto flat = positions.view({-1});
    const auto parts = qkv.split_with_sizes({(H + Hkv) * D, Hkv * D}, -1);
    const auto qk = apply_rotary(parts[0].view({B, 1, H + Hkv, D}), cos.index_select(0, flat).view({B, 1, 1, D}),
                                 signed_sin.index_select(0, flat).view({B, 1, 1, D}));
    k_ref.index_copy_(2, slots, qk.narrow(2, H, Hkv).transpose(1, 2));
    v_ref.index_copy_(2, slots, parts[1].view({B, 1, Hkv, D}).transpose(1, 2));
    CHECK(at::equal(q, qk.narrow(2, 0, H)));
    CHECK(at::equal(k, k_ref));
    CHECK(at::equal(v, v_ref));
    CHECK(k.narrow(2, 5, 1).abs().sum().item<double>() > 0);  // written where the slot says, nowhere else
    CHECK(k.narrow(2, 0, 5).abs().sum().item<double>() == 0);


    const auto gate_up = at::randn({B, 7, 2 * 96}, cuda).mul(4).to(dtype);
    const auto halves = gate_up.split(96, -1);
    CHECK(at::equal(silu_times_up(gate_up), at::silu(halves[0]) * halves[1]));
  }
}

TEST_CASE("lm gpu: the fused rotation normalises Qwen3's query and key heads as LibTorch does, within a rounding") {
  // x * rstd * weight in float32 rounded once (LibTorch's fused rms_norm), then the rotation rounded step by step;
  // the squares are summed in another order than LibTorch's, so within a rounding of the dtype, not bit for bit.
  c10::InferenceMode inference;
  const auto cuda = at::TensorOptions().device(c10::Device(c10::kCUDA, 0));
  const int64_t B = 3, H = 4, Hkv = 2, capacity = 16, n = 32;
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf})
    for (const int64_t D : {32, 64, 128, 256})  // one warp a head to eight
      for (const auto magnitude : {std::pair<double, double>{1.0, 1e-6}, std::pair<double, double>{1e-3, 1e-4}}) {
        const double eps = magnitude.second;  // the second: a mean square of 1e-6 against eps 1e-4, so eps shows
        CAPTURE(dtype);
        CAPTURE(D);
        CAPTURE(eps);
        at::manual_seed(11);
        const auto qkv = (at::randn({B, 1, (H + 2 * Hkv) * D}, cuda) * magnitude.first).to(dtype);
        const auto cos = at::randn({n, D}, cuda).to(dtype), signed_sin = at::randn({n, D}, cuda).to(dtype);
        const auto positions = at::tensor({3, 17, 30}, cuda.dtype(at::kLong)).view({B, 1});
        const auto slots = at::tensor({5}, cuda.dtype(at::kLong));
        const auto q_norm = (1 + 0.5 * at::randn({D}, cuda)).to(dtype), k_norm = at::randn({D}, cuda).to(dtype);
        auto k = at::zeros({B, Hkv, capacity, D}, cuda.dtype(dtype)), v = at::zeros_like(k);
        REQUIRE(rotate_into_cache_serves(qkv, D, /*normalised_heads=*/true));
        const auto q = rotate_into_cache(qkv, positions, slots, cos, signed_sin, k, v, H, Hkv, q_norm, k_norm, eps);

        const auto flat = positions.view({-1});
        const auto parts = qkv.split_with_sizes({(H + Hkv) * D, Hkv * D}, -1);
        const auto heads = parts[0].view({B, 1, H + Hkv, D}).split_with_sizes({H, Hkv}, 2);
        auto normed = [&](const at::Tensor& x, const at::Tensor& weight) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
          return at::rms_norm(x, {D}, weight, eps);  // what the model's path calls
#else
          const auto xf = x.to(at::kFloat);
          return (xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps) * weight.to(at::kFloat)).to(dtype);
#endif
        };
        const auto unrotated = at::cat({normed(heads[0], q_norm), normed(heads[1], k_norm)}, 2);
        const auto c = cos.index_select(0, flat).view({B, 1, 1, D}), s = signed_sin.index_select(0, flat).view({B, 1, 1, D});
        const auto qk = apply_rotary(unrotated, c, s);
        // A normalised element may differ by an ulp (the squares' order), and the rotation's roundings with it: the
        // bound is a few ulps of the rotation's two terms, |x| |cos| + |rotate_half(x)| |sin|.
        const auto magnitudes = unrotated.to(at::kFloat).abs();
        const auto halves = magnitudes.chunk(2, -1);
        const auto terms = magnitudes * c.to(at::kFloat).abs() + at::cat({halves[1], halves[0]}, -1) * s.to(at::kFloat).abs();
        // float32: both sums of squares are trees of float32 adds, a few ulps each; 16-bit: one ulp, seldom.
        const double ulps = dtype == at::kFloat ? 32 * 1.2e-7 : dtype == at::kBFloat16 ? 8 * 7.9e-3 : 8 * 9.8e-4;
        auto close = [&](const at::Tensor& got, const at::Tensor& want, const at::Tensor& bound) {
          return ((got.to(at::kFloat) - want.to(at::kFloat)).abs() <= bound * ulps + 1e-30).all().item<bool>();
        };
        CHECK(close(q, qk.narrow(2, 0, H), terms.narrow(2, 0, H)));
        CHECK(close(k.narrow(2, 5, 1), qk.narrow(2, H, Hkv).transpose(1, 2), terms.narrow(2, H, Hkv).transpose(1, 2)));
        CHECK(at::equal(v.narrow(2, 5, 1), parts[1].view({B, 1, Hkv, D}).transpose(1, 2)));
        CHECK(k.narrow(2, 0, 5).abs().sum().item<double>() == 0);  // only the step's slot written
      }
}

TEST_CASE("lm gpu: decoding with the fused kernels gives what it gives without them") {
  // The element-wise kernels round as LibTorch does; the attention and linear kernels do not (their own tests are
  // below).
  const SwitchedOff no_attention(set_decode_attention), no_linear(set_small_linear);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    const auto model = on_gpu("qwen2_tiny", dtype);
    const auto g = golden("qwen2_tiny");
    std::vector<GenerationRequest> batch;
    for (uint64_t i = 0; i < g.prompts.size(); ++i) batch.push_back(request(g.prompts[i], 0.8, 300 + i, 32));
    same_decoding_without(model, batch, set_decode_kernels, 0);
  }
}

namespace {

// Decode attention in double precision on the CPU: row b's query heads over the slots s <= slot that key_valid marks
// (and the slot itself), grouped query heads sharing key heads.
at::Tensor attention_in_double(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& valid,
                               int64_t slot, double scale) {
  const int64_t B = q.size(0), H = q.size(2), Hkv = k.size(1), G = H / Hkv;
  const auto qd = q.cpu().to(at::kDouble), kd = k.cpu().to(at::kDouble), vd = v.cpu().to(at::kDouble);
  auto seen = valid.cpu().narrow(1, 0, slot + 1).clone();
  seen.select(1, slot).fill_(true);
  auto out = at::zeros({B, 1, H * q.size(3)}, at::kDouble);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const auto keys = kd[b][h / G].narrow(0, 0, slot + 1), values = vd[b][h / G].narrow(0, 0, slot + 1);
      auto scores = at::mv(keys, qd[b][0][h]) * scale;
      scores = scores.masked_fill(at::logical_not(seen[b]), -std::numeric_limits<double>::infinity());
      out[b][0].narrow(0, h * q.size(3), q.size(3)).copy_(at::mv(values.t(), at::softmax(scores, 0)));
    }
  return out;
}

}  // namespace

TEST_CASE("lm gpu: decode attention reads only valid slots up to the step's own, and agrees with double precision") {
  c10::InferenceMode inference;
  struct Shape {
    int64_t B, H, Hkv, D;
    c10::ScalarType dtype;
    double tolerance;
  };
  // Qwen2.5-0.5B's heads, Qwen2.5-1.5B's, one key head per query head, eight per key head, the tiny fixtures' 16.
  // One row spreads over many splits. gpt-oss's heads at batch 1, a batch of 3 of four key heads and 3 rows of two
  // give 8, 12 and 6 blocks, which the tensor-core kernel takes at small batches too. Above 32 rows x key heads the tensor-core kernel takes 16-bit heads of 64 and
  // 128 (with it off, the split kernels take them, as under CRUCIBLE_DECODE_ATTENTION=1).
  const Shape shapes[] = {{1, 14, 2, 64, at::kBFloat16, 2e-2}, {3, 12, 2, 128, at::kHalf, 4e-3},
                          {2, 8, 8, 64, at::kFloat, 1e-5},     {5, 16, 2, 64, at::kFloat, 1e-5},
                          {4, 4, 2, 16, at::kBFloat16, 2e-2},  {2, 4, 2, 16, at::kFloat, 1e-5},
                          {66, 14, 2, 64, at::kBFloat16, 2e-2}, {20, 16, 2, 128, at::kHalf, 4e-3},
                          {40, 3, 1, 64, at::kHalf, 4e-3},      {17, 12, 2, 128, at::kBFloat16, 2e-2},
                          {1, 64, 8, 64, at::kBFloat16, 2e-2},  {3, 16, 4, 128, at::kHalf, 4e-3}};
  const int64_t capacity = 700;
  // With two GPUs or more the kernels also run on the last one (a policy on cuda:1 beside an evaluator on cuda:0).
  const int gpus = crucible::eval::cuda_devices();
  for (const int gpu : gpus > 1 ? std::vector<int>{0, gpus - 1} : std::vector<int>{0})
  for (const auto& shape : shapes)
  for (const bool tensor_cores : {true, false}) {
    const SwitchedOff maybe_no_tensor_cores(set_decode_attention_tensor_cores, !tensor_cores);
    CAPTURE(gpu);
    CAPTURE(tensor_cores);
    const auto cuda = at::TensorOptions().device(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(gpu)));
    CAPTURE(shape.H);
    CAPTURE(shape.D);
    CAPTURE(shape.dtype);
    const auto type = cuda.dtype(shape.dtype);
    at::manual_seed(5);
    const auto q = at::randn({shape.B, 1, shape.H, shape.D}, type);
    auto k = at::randn({shape.B, shape.Hkv, capacity, shape.D}, type), v = at::randn_like(k);
    auto valid = at::rand({shape.B, capacity}, cuda) > 0.2;  // padding and retired requests' slots
    valid[0].narrow(0, 0, 100).fill_(false);                  // a row whose first splits hold nothing valid
    REQUIRE(decode_attention_takes(k, shape.H));
    const bool large = shape.B * shape.Hkv > 32, sixteen_bit = shape.dtype != at::kFloat;
    // Small batches of 4 rows x key heads or more take the tensor-core kernel too.
    const bool on_tensor_cores = decode_attention_on_tensor_cores(k, shape.H);
    const bool enough = large || (shape.B * shape.Hkv >= 4 && !std::getenv("CRUCIBLE_DECODE_ATTENTION_TC_FROM"));
    CHECK((!on_tensor_cores || (tensor_cores && enough && sixteen_bit && shape.D >= 64)));
    if (tensor_cores && large && sixteen_bit && shape.D >= 64 && !on_tensor_cores)
      MESSAGE("the tensor-core attention kernel does not take this GPU (it needs 208 KiB of shared memory a block)");
    if (!std::getenv("CRUCIBLE_DECODE_ATTENTION"))  // by default, small batches, and large ones on tensor cores
      CHECK(decode_attention_serves(k, shape.H) == (!large || on_tensor_cores));
    for (const int64_t slot : {int64_t{0}, int64_t{37}, int64_t{513}, capacity - 1}) {
      CAPTURE(slot);
      const double scale = 1.0 / std::sqrt(static_cast<double>(shape.D));
      const auto expected = attention_in_double(q, k, v, valid, slot, scale);
      // Slots past the step's and invalid ones are never read: NaN there must not reach the output.
      auto k_nan = k.clone(), v_nan = v.clone();
      const auto hidden = at::logical_not(valid).clone();
      hidden.narrow(1, slot, 1).fill_(false);
      if (slot + 1 < capacity) hidden.narrow(1, slot + 1, capacity - slot - 1).fill_(true);
      const auto mask = hidden.view({shape.B, 1, capacity, 1});
      k_nan.masked_fill_(mask, std::numeric_limits<double>::quiet_NaN());
      v_nan.masked_fill_(mask, std::numeric_limits<double>::quiet_NaN());
      const auto slot_tensor = at::tensor({slot}, cuda.dtype(at::kLong));
      for (const int64_t visible : {slot + 1, capacity}) {  // an eager step, and a graph that serves every slot
        CAPTURE(visible);
        const auto out = decode_attention(q, k_nan, v_nan, valid, slot_tensor, visible, scale);
        REQUIRE(out.sizes() == expected.sizes());
        CHECK((out.scalar_type() == shape.dtype));
        CHECK((out.cpu().to(at::kDouble) - expected).abs().max().item<double>() < shape.tolerance);
      }
    }
  }
}

TEST_CASE("lm gpu: decoding with the attention kernels gives LibTorch's attention's tokens, log-probs within 1e-4") {
  const auto model = on_gpu("qwen2_tiny", at::kFloat);
  const auto g = golden("qwen2_tiny");
  std::vector<GenerationRequest> batch;
  for (uint64_t i = 0; i < g.prompts.size(); ++i) batch.push_back(request(g.prompts[i], 0.8, 500 + i, 32));
  {
    c10::InferenceMode inference;  // as the generator decodes
    REQUIRE(decode_attention_serves(at::zeros({1, 2, 8, 16}, at::TensorOptions().device(c10::Device("cuda:0"))), 4));
  }
  same_decoding_without(model, batch, set_decode_attention, 1e-4);
}

TEST_CASE("lm gpu: the fused draw falls where the cumulative distribution says, and never on a zero") {
  c10::InferenceMode inference;
  const int64_t B = 5, V = 151936;  // Qwen2.5's vocabulary
  const double inf = std::numeric_limits<double>::infinity();
  at::manual_seed(11);
  auto logits = at::randn({B, V}, at::TensorOptions().device(at::kCUDA)) * 3;
  // Rows 2 and 3 keep a few tokens, as top-k and top-p leave them; row 4 keeps one.
  const auto kept = at::rand({B, V}, logits.options());
  logits.select(0, 2).masked_fill_(kept.select(0, 2) >= 0.01, -inf);
  logits.select(0, 3).masked_fill_(kept.select(0, 3) >= 0.0002, -inf);
  logits.select(0, 4).fill_(-inf);
  logits.select(0, 4).select(0, 12345).fill_(0.0);
  const auto log_probs = at::log_softmax(logits, -1);
  const auto p = log_probs.exp().to(at::kDouble).cpu();
  const float lowest = 0.5f / 16777216.0f, highest = (16777216.0f - 0.5f) / 16777216.0f;  // row_uniform's range
  for (const float u : {lowest, 0.25f, 0.5f, 0.75f, highest}) {
    CAPTURE(u);
    const auto picks = pick_by_cdf_fused(log_probs, at::full({B, 1}, u, logits.options())).cpu();
    for (int64_t b = 0; b < B; ++b) {
      CAPTURE(b);
      const int64_t j = picks[b][0].item<int64_t>();
      REQUIRE(j >= 0);
      REQUIRE(j < V);
      const auto row = p[b];
      CHECK(row[j].item<double>() > 0);
      const double total = row.sum().item<double>(), before = row.narrow(0, 0, j).sum().item<double>();
      const double target = u * total, slack = 1e-5 * total;
      CHECK(before <= target + slack);
      CHECK(before + row[j].item<double>() >= target - slack);
      const auto nonzero = row.nonzero().view({-1});
      if (b >= 2 && u == lowest) CHECK(j == nonzero[0].item<int64_t>());
      if (b >= 2 && u == highest) CHECK(j == nonzero[-1].item<int64_t>());
    }
  }
}

TEST_CASE("lm gpu: sampling from logits in two kernels draws where the distribution says, greedy rows their argmax") {
  c10::InferenceMode inference;
  const double inf = std::numeric_limits<double>::infinity();
  // The draw a seed makes at step 0: the lowest and the highest (1.0 once rounded) the sampler can make.
  std::optional<uint64_t> lowest_seed, highest_seed;
  for (uint64_t s = 0; s < (uint64_t{1} << 28) && !(lowest_seed && highest_seed); ++s) {
    const float u = row_uniform(s, 0);
    if (!lowest_seed && u < 2e-6f) lowest_seed = s;
    if (!highest_seed && u == 1.0f) highest_seed = s;
  }
  REQUIRE(lowest_seed);
  REQUIRE(highest_seed);
  struct Case {
    int64_t vocab;
    at::ScalarType dtype;
  };
  // Qwen2.5's vocabulary (16-byte loads), and one that is not a whole number of them (loads one by one).
  for (const Case c : {Case{151936, at::kFloat}, Case{151936, at::kBFloat16}, Case{999, at::kFloat}, Case{999, at::kHalf}}) {
    CAPTURE(c.vocab);
    CAPTURE(c.dtype);
    const int64_t B = 10, V = c.vocab;
    const auto cuda = at::TensorOptions().device(at::kCUDA);
    at::manual_seed(13);
    auto logits = (at::randn({B, V}, cuda) * 3).to(c.dtype);
    // Rows 4 and 5 keep a few tokens of equal weight (as top-k leaves them; the last is above rounding of the total),
    // row 6 one; row 7 ties its highest logit at two indices; rows 8 and 9 hold a NaN.
    const auto kept = at::rand({B, V}, cuda);
    for (const int64_t b : {4, 5})
      logits.select(0, b).copy_(at::where(kept.select(0, b) < 0.003, at::zeros({V}, cuda), at::full({V}, -inf, cuda)));
    logits.select(0, 6).fill_(-inf);
    logits.select(0, 6).select(0, V / 2).fill_(1.0);
    logits.select(0, 7).select(0, 5).fill_(50.0);
    logits.select(0, 7).select(0, V - 3).fill_(50.0);
    const int64_t nan_at = V / 3;
    logits.select(0, 8).select(0, nan_at).fill_(std::numeric_limits<double>::quiet_NaN());
    logits.select(0, 9).select(0, nan_at).fill_(std::numeric_limits<double>::quiet_NaN());
    // Rows 0, 7 and 8 are greedy; the others sample at their temperatures, rows 4 and 5 at the lowest and the highest
    // draw.
    const std::vector<double> temperature = {0.0, 1.0, 0.7, 1.3, 1.0, 1.0, 0.9, 0.0, 0.0, 0.8};
    std::vector<float> inv_t(B);
    std::vector<int64_t> seeds(B), steps(B);
    std::vector<uint8_t> greedy(B);
    for (int64_t b = 0; b < B; ++b) {
      greedy[b] = temperature[b] == 0.0;
      inv_t[b] = greedy[b] ? 1.0f : static_cast<float>(1.0 / temperature[b]);
      seeds[b] = 1000 + b;
      steps[b] = b % 3;
    }
    seeds[4] = static_cast<int64_t>(*lowest_seed);
    seeds[5] = static_cast<int64_t>(*highest_seed);
    steps[4] = steps[5] = 0;
    const auto inv_t_dev = at::tensor(inv_t).to(at::kCUDA), greedy_dev = at::tensor(greedy).to(at::kBool).to(at::kCUDA);
    const auto seeds_dev = at::tensor(seeds).to(at::kCUDA), steps_dev = at::tensor(steps).to(at::kCUDA);
    REQUIRE(sample_fused_serves(logits));
    const auto out = sample_fused(logits, inv_t_dev, greedy_dev, seeds_dev, steps_dev, 0);
    const auto again = sample_fused(logits, inv_t_dev, greedy_dev, seeds_dev, steps_dev, 0);
    // The same sums in the same order every time (compared as bits: NaN rows too).
    CHECK(at::equal(out.record.view(at::kLong), again.record.view(at::kLong)));
    // Every row at one step: the same as giving each row that step.
    const auto at_step_2 = sample_fused(logits, inv_t_dev, greedy_dev, seeds_dev, {}, 2);
    const auto each_at_2 = sample_fused(logits, inv_t_dev, greedy_dev, seeds_dev, at::full({B}, 2, seeds_dev.options()), 2);
    CHECK(at::equal(at_step_2.tokens, each_at_2.tokens));

    const auto tokens = out.tokens.cpu(), record = out.record.cpu();
    const auto wide = logits.to(at::kDouble).cpu();
    const auto model_lp = at::log_softmax(wide, -1);
    for (int64_t b = 0; b < B; ++b) {
      CAPTURE(b);
      const int64_t j = tokens[b].item<int64_t>();
      REQUIRE(j >= 0);
      REQUIRE(j < V);
      CHECK(record[0][b].item<double>() == static_cast<double>(j));
      if (b >= 8) {  // as torch.argmax: the NaN's index, greedy or not, and NaN log-probs as LibTorch's log-softmax
        CHECK(j == nan_at);
        CHECK(std::isnan(out.model_logprobs[b].item<float>()));
        continue;
      }
      CHECK(record[1][b].item<double>() == static_cast<double>(out.sampling_logprobs[b].item<float>()));
      CHECK(record[2][b].item<double>() == static_cast<double>(out.model_logprobs[b].item<float>()));
      CHECK(out.model_logprobs[b].item<float>() == doctest::Approx(model_lp[b][j].item<double>()).epsilon(1e-5));
      if (greedy[b]) {
        CHECK(j == wide[b].argmax().item<int64_t>());  // the first highest: row 7 ties at 5 and V - 3
        CHECK(out.sampling_logprobs[b].item<float>() == 0.0f);
        continue;
      }
      const auto lp = at::log_softmax(wide[b] * static_cast<double>(inv_t[b]), -1);
      const auto p = lp.exp();
      CHECK(p[j].item<double>() > 0);
      CHECK(out.sampling_logprobs[b].item<float>() == doctest::Approx(lp[j].item<double>()).epsilon(1e-5));
      const double u = row_uniform(static_cast<uint64_t>(seeds[b]), steps[b]);
      const double before = p.narrow(0, 0, j).sum().item<double>();
      CHECK(before <= u + 1e-5);
      CHECK(before + p[j].item<double>() >= u - 1e-5);
      const auto nonzero = p.nonzero().view({-1});
      if (b == 4) CHECK(j == nonzero[0].item<int64_t>());
      if (b == 5 || b == 6) CHECK(j == nonzero[-1].item<int64_t>());
    }
  }
}

TEST_CASE("lm gpu: decoding with the fused sampler gives LibTorch's sampler's tokens, log-probs within 1e-5") {
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    const auto model = on_gpu("qwen2_tiny", dtype);
    const auto g = golden("qwen2_tiny");
    std::vector<GenerationRequest> batch;
    for (uint64_t i = 0; i < g.prompts.size(); ++i) {
      batch.push_back(request(g.prompts[i], i == 0 ? 0.0 : 0.6 + 0.2 * i, 1100 + i, 32));
      batch.back().sampling.top_p = 1.0;  // top-p and top-k rows take LibTorch's path
    }
    same_decoding_without(model, batch, set_fused_sampling, 1e-5);
    same_decoding_without(model, {batch[1]}, set_fused_sampling, 1e-5);
  }
}

TEST_CASE("lm gpu: the one-row linear kernel agrees with double precision, with a bias, a residual or both, a norm, an activation") {
  c10::InferenceMode inference;
  struct Shape {
    int64_t N, K;
  };
  // Qwen2.5-0.5B's qkv and down projections (two and four warps a row on an H100), Qwen2.5-1.5B's o projection (two),
  // enough rows for one warp a row, a ragged one (the last block's warps partly idle), more outputs than the GPU
  // holds blocks for (each block takes several in turn), and gpt-oss's q/k/v and output projections (blocks taking two
  // or three rounds of rows, the second copied into shared memory ahead).
  const Shape shapes[] = {{1152, 896}, {896, 4864}, {1536, 1536}, {4096, 896}, {1001, 24}, {40000, 64}, {5120, 2880},
                          {2880, 4096}};
  const int gpus = crucible::eval::cuda_devices();  // the last GPU too, where there are two or more
  for (const int gpu : gpus > 1 ? std::vector<int>{0, gpus - 1} : std::vector<int>{0})
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf})
    for (const auto& shape : shapes) {
      CAPTURE(gpu);
      const auto cuda = at::TensorOptions().device(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(gpu)));
      CAPTURE(dtype);
      CAPTURE(shape.N);
      const int64_t rows = 1;
      at::manual_seed(shape.K);
      const auto type = cuda.dtype(dtype);
      const auto x = at::randn({rows, 1, shape.K}, type), w = at::randn({shape.N, shape.K}, type).div(8);
      const auto bias = at::randn({shape.N}, type), residual = at::randn({rows, 1, shape.N}, type);
      REQUIRE(small_linear_serves(x, w));
      const auto exact = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
      // Rounding of the result, plus float32 sums of K products (the products are exact in double).
      const double scale = dtype == at::kFloat ? 1e-4 : dtype == at::kHalf ? 4e-3 : 3e-2;
      const double tolerance = scale * (exact.abs().max().item<double>() + 4);
      const auto off = [&](const at::Tensor& got, const at::Tensor& want) {
        CHECK((got.scalar_type() == dtype));
        return (got.to(at::kDouble) - want).abs().max().item<double>();
      };
      CHECK(off(small_linear(x, w, {}, {}), exact) < tolerance);
      CHECK(off(small_linear(x, w, bias, {}), exact + bias.to(at::kDouble)) < tolerance);
      CHECK(off(small_linear(x, w, {}, residual), exact + residual.to(at::kDouble)) < tolerance);
      CHECK(off(small_linear(x, w, bias, residual), exact + bias.to(at::kDouble) + residual.to(at::kDouble)) <
            tolerance);

      // The norm folded in: against the norm in float32 rounded once to the dtype (as LibTorch's fused rms_norm),
      // then the exact product.
      const auto norm = at::rand({shape.K}, type).add(0.5);
      const auto normed = LinearFolds::rms_normed(norm, 1e-6);
      REQUIRE(small_linear_serves(x, w, bias, {}, normed));
      const auto xf = x.to(at::kFloat);
      const auto x_normed = (xf * at::rsqrt(xf.pow(2).mean(-1, true) + 1e-6) * norm.to(at::kFloat)).to(dtype);
      CHECK(off(small_linear(x, w, bias, {}, normed),
                at::matmul(x_normed.to(at::kDouble), w.to(at::kDouble).t()) + bias.to(at::kDouble)) < tolerance);
      // Rows ahead or not: the same sums in the same order.
      set_small_linear_ahead(false);
      const auto plain = small_linear(x, w, bias, residual), plain_normed = small_linear(x, w, bias, {}, normed);
      set_small_linear_ahead(true);
      CHECK(at::equal(small_linear(x, w, bias, residual), plain));
      CHECK(at::equal(small_linear(x, w, bias, {}, normed), plain_normed));
      // Writing the normalised row too (a router's for its experts): the same products, and the row as the kernel
      // normalised it, within one rounding of the float32 norm's (the sums of squares go in another order).
      auto writing = normed;
      writing.normed_out = at::full_like(x, 7);
      REQUIRE(small_linear_serves(x, w, bias, {}, writing));
      CHECK(at::equal(small_linear(x, w, bias, {}, writing), small_linear(x, w, bias, {}, normed)));
      const double ulp = dtype == at::kFloat ? 1e-6 : dtype == at::kHalf ? 1e-3 : 8e-3;
      CHECK(off(writing.normed_out, x_normed.to(at::kDouble)) <=
            ulp * (x_normed.to(at::kDouble).abs().max().item<double>() + 1));
      auto misplaced = normed;
      misplaced.normed_out = at::empty({shape.K + 1}, type);
      CHECK_FALSE(small_linear_serves(x, w, bias, {}, misplaced));  // not the row's size
      misplaced.normed_out = x;
      CHECK_FALSE(small_linear_serves(x, w, bias, {}, misplaced));  // written while other blocks read x
      // The activation folded in too, rows [gate; up]: against LibTorch's silu(gate) * up of the exact products,
      // rounded to the dtype (silu's slope is below 1.1, so the result is within a tolerance of the products').
      const auto gate_up_w = at::cat({w, at::randn({shape.N, shape.K}, type).div(8)});
      const auto gate_up_bias = at::randn({2 * shape.N}, type);
      const auto gated = LinearFolds::rms_normed(norm, 1e-6, /*gated=*/true);
      REQUIRE(small_linear_serves(x, gate_up_w, gate_up_bias, {}, gated));
      const auto projected = (at::matmul(x_normed.to(at::kDouble), gate_up_w.to(at::kDouble).t()) +
                              gate_up_bias.to(at::kDouble)).to(dtype);
      const auto halves = projected.split(shape.N, -1);
      const auto activated = (at::silu(halves[0]) * halves[1]).to(at::kDouble);
      const double up_scale = halves[1].to(at::kDouble).abs().max().item<double>() + 1;
      CHECK(off(small_linear(x, gate_up_w, gate_up_bias, {}, gated), activated) < 2 * tolerance * up_scale);
      CHECK_FALSE(small_linear_serves(x, gate_up_w, {}, residual, gated));  // no residual after the activation
    }
  // Two rows, a row width that is not whole 16-byte slices, a normalised row wider than the kernel's shared memory
  // go to cuBLAS; so do gate and up rows that do not pair.
  const auto cuda = at::TensorOptions().device(c10::Device("cuda:0"));
  CHECK_FALSE(small_linear_serves(at::randn({2, 1, 64}, cuda), at::randn({8, 64}, cuda)));
  CHECK_FALSE(small_linear_serves(at::randn({1, 1, 63}, cuda), at::randn({8, 63}, cuda)));
  CHECK(small_linear_serves(at::randn({1, 1, 16384}, cuda), at::randn({8, 16384}, cuda)));  // 64 KiB read from L2
  CHECK_FALSE(small_linear_serves(at::randn({1, 1, 16384}, cuda), at::randn({8, 16384}, cuda), {}, {},
                                  LinearFolds::rms_normed(at::ones({16384}, cuda), 1e-6)));  // too wide to normalise
  CHECK_FALSE(small_linear_serves(at::randn({1, 1, 64}, cuda), at::randn({7, 64}, cuda), {}, {},
                                  LinearFolds::rms_normed(at::ones({64}, cuda), 1e-6, /*gated=*/true)));  // odd rows
}

TEST_CASE("lm gpu: decoding one row with the linear kernel gives cuBLAS's tokens, log-probs within 1e-4") {
  const auto model = on_gpu("qwen2_tiny", at::kFloat);
  const auto g = golden("qwen2_tiny");
  for (uint64_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    same_decoding_without(model, {request(g.prompts[i], 0.8, 700 + i, 32)}, set_small_linear, 1e-4);  // one row
  }
}

TEST_CASE("lm gpu: launching the decode kernels early changes no bit of what decoding gives") {
  const auto g = golden("qwen2_tiny");
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    const auto model = on_gpu("qwen2_tiny", dtype);
    std::vector<GenerationRequest> batch;
    for (uint64_t i = 0; i < g.prompts.size(); ++i) batch.push_back(request(g.prompts[i], 0.8, 900 + i, 32));
    same_decoding_without(model, {batch.front()}, set_early_launch, 0);  // one row: the linear kernel too
    same_decoding_without(model, batch, set_early_launch, 0);
  }
}
