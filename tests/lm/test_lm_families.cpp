// Qwen3 and gpt-oss on tiny random models (float32 on the CPU): the model's logits against a plain reference written
// from the architectures' definitions (tiny_families.h), and cached decoding against whole-sequence passes.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <doctest/doctest.h>

#include <fstream>
#include <limits>
#include <vector>

#include "lm/generation/generator.h"
#include "lm/format/model_files.h"
#include "lm/model/mxfp4_checkpoint.h"
#include "lm/model/rotary.h"
#include "lm/finite_difference.h"
#include "lm/model/flash_sink_attention.h"
#include "lm/model/lora.h"
#include "lm/model/plain_attention.h"
#include "lm/sink_attention_reference.h"
#include "lm/model/transformer.h"
#include "lm/tiny_families.h"
#include "lm/training/policy_loss.h"
#include "lm/training/lora_trainer.h"

using namespace crucible;
using namespace crucible::lm;

namespace {

float max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<float>(); }

at::Tensor as_batch(const std::vector<int64_t>& ids) {
  return at::tensor(ids, at::kLong).view({1, static_cast<int64_t>(ids.size())});
}

std::vector<int64_t> prompt_of(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(1 + (i * 7 + salt * 13) % (vocab - 1));
  return ids;
}

Transformer load_tiny(const test::TinyModel& m, const test::ScratchDir& dir, bool mxfp4 = false) {
  test::write_model_dir(m, dir.path(), mxfp4);
  return Transformer::load(dir.path());
}

GenerationRequest greedy(std::vector<int64_t> prompt, int64_t n) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_new_tokens = n;
  return r;
}

// Each greedy token is the argmax of a whole-sequence pass over the prompt and the tokens before it.
void check_greedy_against_full_passes(const Transformer& model, const std::vector<int64_t>& prompt,
                                      const std::vector<int64_t>& tokens) {
  auto seq = prompt;
  for (const auto t : tokens) {
    const auto logits = model.forward_full(as_batch(seq))[0][-1];
    CHECK(logits.argmax().item<int64_t>() == t);
    seq.push_back(t);
  }
}

}  // namespace

TEST_CASE("qwen3: logits at every position equal the reference, with each head's query and key normalised") {
  c10::InferenceMode guard;
  const auto m = test::tiny_qwen3();
  const test::ScratchDir dir("qwen3");
  const auto model = load_tiny(m, dir);
  CHECK(model.config().qk_norm);
  for (const int64_t n : {1, 5, 17}) {
    CAPTURE(n);
    const auto ids = prompt_of(n, 48, n);
    CHECK(max_diff(model.forward_full(as_batch(ids))[0], test::reference_logits(m, ids)) < 1e-4f);
  }
  // The norms matter: the same weights read as Qwen2 (no norms, no bias) give other logits.
  auto unnormed = m;
  for (auto& [name, t] : unnormed.weights)
    if (name.find("_norm.weight") != std::string::npos && name.find("self_attn") != std::string::npos) t = at::ones_like(t);
  const auto ids = prompt_of(9, 48, 3);
  CHECK(max_diff(test::reference_logits(unnormed, ids), test::reference_logits(m, ids)) > 1e-2f);
}

TEST_CASE("gpt-oss: logits at every position equal the reference (sinks, a window shorter than the prompt, YaRN, "
          "routed experts), dense and MXFP4") {
  c10::InferenceMode guard;
  const auto m = test::tiny_gpt_oss();
  const test::ScratchDir dense_dir("gptoss-dense"), packed_dir("gptoss-mxfp4");
  const auto dense = load_tiny(m, dense_dir);
  const auto packed = load_tiny(m, packed_dir, /*mxfp4=*/true);
  CHECK(!dense.weights().blocks[0].moe.gate_up.packed());
  REQUIRE(packed.weights().blocks[0].moe.gate_up.packed());
  CHECK((packed.weights().blocks[0].moe.down.blocks.scalar_type() == at::kByte));
  for (const int64_t n : {1, 3, 4, 19}) {
    CAPTURE(n);
    const auto ids = prompt_of(n, 48, n);
    const auto expected = test::reference_logits(m, ids);
    CHECK(max_diff(dense.forward_full(as_batch(ids))[0], expected) < 1e-4f);
    CHECK(max_diff(packed.forward_full(as_batch(ids))[0], expected) < 1e-4f);
  }
}

TEST_CASE("gpt-oss: a dense checkpoint packed to MXFP4 loads packed and gives the dense model's logits") {
  c10::InferenceMode guard;
  const auto m = test::tiny_gpt_oss();
  const test::ScratchDir dense_dir("gptoss-topack"), packed_dir("gptoss-packed");
  const auto dense = load_tiny(m, dense_dir);
  const auto tensors = mxfp4_checkpoint_tensors(dense.config(), ModelFiles::open(dense_dir.path()));
  write_safetensors(packed_dir.path() / "model.safetensors", tensors);
  std::filesystem::copy_file(dense_dir.path() / "config.json", packed_dir.path() / "config.json");
  const auto packed = Transformer::load(packed_dir.path());
  CHECK(packed.weights().blocks[1].moe.down.packed());
  CHECK(packed.weights().blocks[1].moe.down.blocks.sizes().vec() == std::vector<int64_t>{4, 64, 1, 16});
  const auto ids = prompt_of(12, 48, 2);
  CHECK(max_diff(packed.forward_full(as_batch(ids)), dense.forward_full(as_batch(ids))) < 1e-5f);
  // A scale byte of 255 is NaN in the MX format: refused at load, naming the tensor.
  auto damaged = tensors;
  for (auto& t : damaged)
    if (t.name == "model.layers.1.mlp.experts.down_proj_scales") t.bytes[3] = std::byte{255};
  const test::ScratchDir damaged_dir("gptoss-damaged");
  write_safetensors(damaged_dir.path() / "model.safetensors", damaged);
  std::filesystem::copy_file(dense_dir.path() / "config.json", damaged_dir.path() / "config.json");
  try {
    Transformer::load(damaged_dir.path());
    FAIL("a NaN scale loaded");
  } catch (const ModelFormatError& e) {
    CHECK(std::string(e.what()).find("down_proj_scales: a scale of 255") != std::string::npos);
  }
  // A dense model has nothing to pack.
  const test::ScratchDir qwen_dir("qwen3-nopack");
  const auto qwen = load_tiny(test::tiny_qwen3(), qwen_dir);
  CHECK_THROWS_AS(mxfp4_checkpoint_tensors(qwen.config(), ModelFiles::open(qwen_dir.path())), ModelFormatError);
}

TEST_CASE("gpt-oss: random weights at a config's shapes load from config.json alone, seeded, with packed experts") {
  c10::InferenceMode guard;
  const auto m = test::tiny_gpt_oss();
  const test::ScratchDir dir("gptoss-random");
  { std::ofstream(dir.path() / "config.json") << m.config.dump(); }
  CHECK_THROWS_AS(Transformer::load(dir.path()), ModelFormatError);  // no weights: files are required by default
  LoadOptions options;
  options.random_seed = 5;
  const auto a = Transformer::load(dir.path(), options), again = Transformer::load(dir.path(), options);
  options.random_seed = 6;
  const auto other = Transformer::load(dir.path(), options);
  const auto& experts = a.weights().blocks[1].moe;
  CHECK(experts.gate_up.packed());
  CHECK(experts.down.blocks.sizes().vec() == std::vector<int64_t>{4, 64, 1, 16});
  CHECK(at::equal(a.weights().blocks[0].input_norm, at::ones_like(a.weights().blocks[0].input_norm)));
  const auto ids = prompt_of(9, 48, 3);
  const auto logits = a.forward_full(as_batch(ids));
  CHECK(logits.size(2) == m.config["vocab_size"].get<int64_t>());
  CHECK(at::isfinite(logits).all().item<bool>());
  CHECK(at::equal(logits, again.forward_full(as_batch(ids))));
  CHECK(max_diff(logits, other.forward_full(as_batch(ids))) > 1e-4f);
}

TEST_CASE("gpt-oss: the reference itself depends on sinks, the window and YaRN (the comparison above can fail)") {
  c10::InferenceMode guard;
  const auto m = test::tiny_gpt_oss();
  const auto ids = prompt_of(19, 48, 5);
  const auto base = test::reference_logits(m, ids);
  auto no_sinks = m;
  for (auto& [name, t] : no_sinks.weights)
    if (name.find("sinks") != std::string::npos) t = at::full_like(t, -1e9);
  auto full = m;
  full.config["layer_types"] = {"full_attention", "full_attention"};
  auto plain_rope = m;
  plain_rope.config.erase("rope_scaling");
  for (const auto* variant : {&no_sinks, &full, &plain_rope}) CHECK(max_diff(test::reference_logits(*variant, ids), base) > 1e-3f);
}

TEST_CASE("qwen3 and gpt-oss: greedy decoding with the cache follows whole-sequence passes, alone and batched") {
  c10::InferenceMode guard;
  for (const bool gpt_oss : {false, true}) {
    CAPTURE(gpt_oss);
    const auto m = gpt_oss ? test::tiny_gpt_oss() : test::tiny_qwen3();
    const test::ScratchDir dir("families-greedy");
    const auto model = load_tiny(m, dir, gpt_oss);
    Generator generator(model, [](int64_t) { return std::string(); });
    // Prompts of 2, 5 and 11 tokens, 12 new tokens: decode steps well past the 3-token window, left-padded together.
    std::vector<GenerationRequest> batch;
    for (const int64_t n : {2, 5, 11}) batch.push_back(greedy(prompt_of(n, 48, n), 12));
    const auto together = generator.generate(batch);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      CAPTURE(i);
      const auto alone = generator.generate({batch[i]})[0];
      CHECK(alone.tokens.size() == 12);
      CHECK(together[i].tokens == alone.tokens);
      check_greedy_against_full_passes(model, batch[i].prompt, alone.tokens);
    }
  }
}

TEST_CASE("gpt-oss: sampled tokens' log-probs equal a whole-sequence pass's, batched past the window (float32)") {
  // What a trainer recomputes must be what the sampler saw: decode steps (sinks, the 3-token window over a left-padded
  // batch, routing per step) against one teacher-forced pass over prompt and completion.
  c10::InferenceMode guard;
  const auto m = test::tiny_gpt_oss();
  const test::ScratchDir dir("gptoss-sampled-logprobs");
  const auto model = load_tiny(m, dir, /*mxfp4=*/true);
  Generator generator(model, [](int64_t) { return std::string(); });
  std::vector<GenerationRequest> batch;
  for (const int64_t n : {1, 6, 13}) {
    GenerationRequest r;
    r.prompt = prompt_of(n, 48, n);
    r.sampling.temperature = 1.0;
    r.sampling.seed = static_cast<uint64_t>(n);
    r.max_new_tokens = 10;
    batch.push_back(r);
  }
  const auto completions = generator.generate(batch);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    CAPTURE(i);
    const auto& c = completions[i];
    REQUIRE(c.model_logprobs.size() == c.tokens.size());
    auto seq = batch[i].prompt;
    seq.insert(seq.end(), c.tokens.begin(), c.tokens.end());
    const auto lp = at::log_softmax(model.forward_full(as_batch(seq))[0], -1);
    const auto P = static_cast<int64_t>(batch[i].prompt.size());
    for (std::size_t k = 0; k < c.tokens.size(); ++k)
      CHECK(c.model_logprobs[k] == doctest::Approx(lp[P - 1 + static_cast<int64_t>(k)][c.tokens[k]].item<float>()).epsilon(1e-4));
  }
}

TEST_CASE("gpt-oss attention: chunks of query rows give the rows of one whole pass, with sinks, windows and padding") {
  at::manual_seed(11);
  const int64_t B = 3, T = 37, H = 8, Hkv = 2, D = 16, visible = 37;
  const auto q = at::randn({B, T, H, D});
  const auto k = at::randn({B, Hkv, visible + 5, D});  // a cache larger than what is visible
  const auto v = at::randn({B, Hkv, visible + 5, D});
  const auto slots = at::arange(T, at::kLong);
  auto valid = at::ones({B, 1, T, visible}, at::kBool) & (slots.view({1, -1}) <= slots.view({-1, 1})).view({1, 1, T, T});
  valid.select(0, 1).narrow(-1, 0, 4).fill_(false);  // row 1 left-padded
  const auto sinks = at::randn({H});
  for (const int64_t window : {int64_t{0}, int64_t{5}}) {
    const auto mask = window > 0 ? sliding_window_mask(valid, slots, window) : valid;
    for (const bool with_sinks : {false, true}) {
      CAPTURE(window);
      CAPTURE(with_sinks);
      const at::Tensor s = with_sinks ? sinks : at::Tensor();
      const auto whole = plain_attention(q, k, v, mask, s, 0.25, visible, int64_t{1} << 40);
      // 1 row, 6 rows (an uneven last chunk) and a bound smaller than one row (still one row a chunk).
      for (const int64_t rows : {int64_t{1}, int64_t{6}, int64_t{0}}) {
        CAPTURE(rows);
        const auto chunked = plain_attention(q, k, v, mask, s, 0.25, visible, rows * B * H * visible);
        REQUIRE(chunked.sizes() == whole.sizes());
        CHECK(at::allclose(chunked, whole, 1e-6, 1e-6, /*equal_nan=*/true));  // padded queries see nothing
      }
      // A mask broadcast over the query rows is taken by every chunk whole.
      const auto last_row = mask.narrow(2, T - 1, 1);
      const auto broadcast_whole = plain_attention(q, k, v, last_row, s, 0.25, visible, int64_t{1} << 40);
      CHECK(at::allclose(plain_attention(q, k, v, last_row, s, 0.25, visible, 4 * B * H * visible), broadcast_whole,
                         1e-6, 1e-6, /*equal_nan=*/true));
    }
  }
}

namespace {

// What a flash kernel computes, in double: causal attention within `window` positions (0: none), key head h / G for
// query head h. q [B, T, H, D], k and v [B, T, Hkv, D] -> probabilities [B, H, T, T], o [B, T, H, D], lse [B, H, T].
struct KernelRows {
  at::Tensor probs, o, lse;
};
at::Tensor grouped_keys(const at::Tensor& k, int64_t H) {  // [B, T, Hkv, D] -> [B, H, T, D]
  return k.transpose(1, 2).repeat_interleave(H / k.size(2), 1);
}
// Which keys each query sees [T, T]: causal, within `window` positions where it is not 0.
at::Tensor visible_keys(int64_t T, int64_t window) {
  const auto slots = at::arange(T, at::kLong);
  auto seen = slots.view({1, T}) <= slots.view({T, 1});
  return window > 0 ? seen & (slots.view({1, T}) > slots.view({T, 1}) - window) : seen;
}
KernelRows kernel_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale, int64_t window) {
  const int64_t T = q.size(1), H = q.size(2);
  const auto scores = (at::matmul(q.transpose(1, 2), grouped_keys(k, H).transpose(-1, -2)) * scale)
                          .masked_fill(at::logical_not(visible_keys(T, window)),
                                       -std::numeric_limits<double>::infinity());
  const auto lse = at::logsumexp(scores, -1);
  const auto probs = at::exp(scores - lse.unsqueeze(-1));
  return {probs, at::matmul(probs, grouped_keys(v, H)).transpose(1, 2), lse};
}

// The kernel's backward as flash attention states it: dV = P^T dO, dP = dO V^T, dS = P (dP - D) with D the row sums
// of dO times the `out` it is given, dQ = dS K scale, dK = dS^T Q scale; key heads summed over their query heads.
std::vector<at::Tensor> kernel_backward(const at::Tensor& d_out, const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, const at::Tensor& out, const at::Tensor& probs,
                                        double scale) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2);
  const auto dO = d_out.transpose(1, 2);                                   // [B, H, T, D]
  const auto rows = (d_out * out).sum(-1).transpose(1, 2).unsqueeze(-1);  // D: [B, H, T, 1]
  const auto dS = probs * (at::matmul(dO, grouped_keys(v, H).transpose(-1, -2)) - rows);
  const auto dq = (at::matmul(dS, grouped_keys(k, H)) * scale).transpose(1, 2);
  const auto by_group = [&](const at::Tensor& t) {  // [B, H, T, D] -> [B, T, Hkv, D]
    return t.view({B, Hkv, H / Hkv, T, D}).sum(2).transpose(1, 2);
  };
  const auto dk = by_group(at::matmul(dS.transpose(-1, -2), q.transpose(1, 2)) * scale);
  const auto dv = by_group(at::matmul(probs.transpose(-1, -2), dO));
  return {dq, dk, dv};
}

}  // namespace

TEST_CASE("gpt-oss attention: the sink's algebra around a flash kernel's rows gives the sink softmax and its gradients") {
  // flash_sink_attention's forward and backward (flash_sink_attention.h) with the kernel emulated in double: the
  // output and every gradient equal the sink softmax's.
  auto g = at::make_generator<at::CPUGeneratorImpl>(3);
  const int64_t B = 2, T = 19, H = 4, Hkv = 2, D = 8;
  const double scale = 0.3;
  for (const int64_t window : {int64_t{0}, int64_t{5}}) {
    CAPTURE(window);
    const auto q = at::randn({B, T, H, D}, g, at::kDouble), k = at::randn({B, T, Hkv, D}, g, at::kDouble),
               v = at::randn({B, T, Hkv, D}, g, at::kDouble), sinks = at::randn({H}, g, at::kDouble) * 2,
               grad = at::randn({B, T, H * D}, g, at::kDouble);
    const auto rows = kernel_forward(q, k, v, scale, window);
    const auto sinked = sinked_rows(rows.o, rows.lse, sinks);
    const auto d = kernel_backward(kernel_output_gradient(grad.view({B, T, H, D}), sinked.factor), q, k, v,
                                   sinked.out, rows.probs, scale);
    const auto d_sinks = sink_gradient(grad.view({B, T, H, D}), sinked.out, sinked.factor, at::kDouble);

    // The sink as one more column of each row's softmax, its share dropped, differentiated by autograd.
    auto qr = q.clone().requires_grad_(), kr = k.clone().requires_grad_(), vr = v.clone().requires_grad_(),
         sr = sinks.clone().requires_grad_();
    const auto want = test::sink_attention_in_double(qr, kr.transpose(1, 2), vr.transpose(1, 2),
                                                     visible_keys(T, window).view({1, 1, T, T}), sr, scale);
    (want * grad).sum().backward();
    CHECK(at::allclose(sinked.out.reshape({B, T, H * D}), want.detach(), 1e-9, 1e-9));
    CHECK(at::allclose(d[0], qr.grad(), 1e-9, 1e-9));
    CHECK(at::allclose(d[1], kr.grad(), 1e-9, 1e-9));
    CHECK(at::allclose(d[2], vr.grad(), 1e-9, 1e-9));
    CHECK(at::allclose(d_sinks, sr.grad(), 1e-9, 1e-9));
  }
}

TEST_CASE("yarn: inverse frequencies and the attention factor as gpt-oss defines them") {
  const auto config = parse_model_config(test::tiny_gpt_oss().config.dump());
  const auto [expected, concentration] = test::ref_inverse_frequencies(test::tiny_gpt_oss().config);
  CHECK(max_diff(rope_inverse_frequencies(config), expected) < 1e-7f);
  CHECK(rope_attention_factor(config) == doctest::Approx(concentration));
  // The ramp sits inside the head: the first frequency is kept, the last divided by the factor.
  const auto plain = 1.0 / std::pow(150000.0, 14.0 / 16);
  CHECK(rope_inverse_frequencies(config)[0].item<float>() == doctest::Approx(1.0));
  CHECK(rope_inverse_frequencies(config)[7].item<float>() == doctest::Approx(plain / 32));
}

namespace {

LoraAdapter random_adapter(const Transformer& model, std::vector<LoraTarget> targets,
                           std::vector<LoraRankOverride> rank_pattern = {},
                           std::vector<LoraAlphaOverride> alpha_pattern = {}) {
  LoraConfig config;
  config.rank = 4;
  config.alpha = 8;
  config.targets = std::move(targets);
  config.rank_pattern = std::move(rank_pattern);
  config.alpha_pattern = std::move(alpha_pattern);
  auto adapter = LoraAdapter::create(model.config(), config, c10::Device(c10::kCPU), at::kFloat, 3);
  at::NoGradGuard no_grad;
  auto g = at::detail::createCPUGenerator(9);
  for (auto& p : adapter.parameters())
    if (p.abs().sum().item<double>() == 0) p.normal_(0, 0.2, g);
  return adapter;
}

}  // namespace

TEST_CASE("gpt-oss and qwen3 LoRA: gradients through sinks, windows, q/k norms and the MXFP4 experts match finite "
          "differences") {
  for (const bool gpt_oss : {false, true}) {
    CAPTURE(gpt_oss);
    const auto m = gpt_oss ? test::tiny_gpt_oss() : test::tiny_qwen3();
    const test::ScratchDir dir("families-grad");
    auto model = load_tiny(m, dir, gpt_oss);
    // Layer 0's q and v feed everything after them: the second layer's window, sinks and experts.
    auto adapter = random_adapter(model, {LoraTarget::q, LoraTarget::v, LoraTarget::o});
    model.use_adapter(&adapter);
    const auto ids = prompt_of(11, 48, 4);
    const auto params = adapter.parameters();  // q A, q B, v A, v B, o A, o B of layer 0, then layer 1
    const auto t = at::tensor(ids, at::kLong).view({1, -1});
    token_logprobs(model, t, at::ones_like(t).to(at::kBool)).logprobs.sum().backward();
    int checked = 0;
    for (const auto& [index, flat] : std::vector<std::pair<std::size_t, int64_t>>{{0, 3}, {0, 70}, {3, 5}, {5, 9}, {7, 11}}) {
      auto p = params[index];
      const double analytic = p.grad().view(-1)[flat].item<double>();
      const double numeric = test::numeric_gradient(model, ids, p, flat);
      CAPTURE(index);
      CHECK(analytic == doctest::Approx(numeric).epsilon(0.03).scale(1.0));
      checked += std::abs(analytic) > 1e-3;
    }
    CHECK(checked >= 3);
  }
}

TEST_CASE("gpt-oss LoRA: no dense MLP to adapt; a GRPO step with KL trains the attention and saves as PEFT") {
  const auto m = test::tiny_gpt_oss();
  const test::ScratchDir dir("gptoss-grpo"), saved("gptoss-adapter");
  auto model = load_tiny(m, dir, /*mxfp4=*/true);
  LoraConfig config;  // every target named, as "all-linear" would
  config.rank = 4;
  auto adapter = LoraAdapter::create(model.config(), config, c10::Device(c10::kCPU), at::kFloat, 1);
  CHECK(adapter.find(0, LoraTarget::q) != nullptr);
  CHECK(adapter.find(0, LoraTarget::gate) == nullptr);
  CHECK(adapter.find(1, LoraTarget::down) == nullptr);
  CHECK(adapter.parameters().size() == 2 * 4 * 2);  // A and B of q, k, v, o in two layers
  TrainerOptions options;
  options.learning_rate = 1e-2;
  options.loss.kl_coef = 0.1;
  LoraTrainer trainer(model, adapter, options);
  SequenceBatch batch;
  for (int64_t i = 0; i < 4; ++i) {
    batch.sequences.push_back(prompt_of(8 + i, 48, i));
    batch.prompt_lengths.push_back(5);
    batch.advantages.push_back(i % 2 ? 1.0f : -1.0f);
  }
  const auto first = trainer.policy_step(batch);
  CHECK(first.grad_norm > 0);
  const auto second = trainer.policy_step(batch);
  REQUIRE(second.kl);
  CHECK(*second.kl > 0);
  adapter.save_peft(saved.path());
  const auto loaded = LoraAdapter::load_peft(saved.path(), model.config(), c10::Device(c10::kCPU), at::kFloat);
  const auto ids = prompt_of(9, 48, 1);
  at::NoGradGuard no_grad;
  model.use_adapter(&adapter);
  const auto trained = model.forward_full(as_batch(ids));
  model.use_adapter(&loaded);
  CHECK(max_diff(model.forward_full(as_batch(ids)), trained) == 0.0f);
  // The same adapter as a checkpoint written with target_modules = "all-linear" (TTT-Discover's): the attention.
  auto config_json = nlohmann::json::parse(test::read_file(saved.path() / "adapter_config.json"));
  config_json["target_modules"] = "all-linear";
  test::write_file(saved.path() / "adapter_config.json", config_json.dump());
  const auto all_linear = LoraAdapter::load_peft(saved.path(), model.config(), c10::Device(c10::kCPU), at::kFloat);
  CHECK(all_linear.parameters().size() == 2 * 4 * 2);
  model.use_adapter(&all_linear);
  CHECK(max_diff(model.forward_full(as_batch(ids)), trained) == 0.0f);
  config_json["target_modules"] = ".*_proj";  // a regular expression: refused, naming the key
  test::write_file(saved.path() / "adapter_config.json", config_json.dump());
  CHECK_THROWS_WITH_AS(LoraAdapter::load_peft(saved.path(), model.config(), c10::Device(c10::kCPU), at::kFloat),
                       doctest::Contains("target_modules"), ModelFormatError);
  model.use_adapter(nullptr);
}

TEST_CASE("gpt-oss LoRA on the router and experts: PEFT's layout, gradients through the dequantised experts, files") {
  const auto m = test::tiny_gpt_oss();
  const test::ScratchDir dir("gptoss-experts-lora"), saved("gptoss-experts-adapter");
  auto model = load_tiny(m, dir, /*mxfp4=*/true);
  auto adapter = random_adapter(model, {LoraTarget::q, LoraTarget::router, LoraTarget::experts_gate_up,
                                        LoraTarget::experts_down});
  // PEFT's shapes: A [E r, in], B [out, r E] (4 experts, rank 4, hidden 64, expert width 32).
  const auto* gate_up = adapter.find(1, LoraTarget::experts_gate_up);
  REQUIRE(gate_up);
  CHECK(gate_up->a.sizes().vec() == std::vector<int64_t>{16, 64});
  CHECK(gate_up->b.sizes().vec() == std::vector<int64_t>{64, 16});
  CHECK(adapter.find(0, LoraTarget::router)->b.sizes().vec() == std::vector<int64_t>{4, 4});
  CHECK(adapter.adapts_parameters());
  CHECK(!model.fold_adapter(&adapter));
  CHECK_THROWS_AS(model.merge_adapter(adapter), std::invalid_argument);

  // Expert e's delta is B[:, e::E] A[e r : (e + 1) r], as PEFT's einsum over its reshaped matrices gives it.
  const int64_t e = 2, r = 4, E = 4;
  const auto x = at::randn({3, 64});
  const auto mine = adapter.plus_expert_delta(1, LoraTarget::experts_gate_up, e, E, x, at::zeros({3, 64}));
  const auto b_e = gate_up->b.view({64, r, E}).select(2, e);
  const auto a_e = gate_up->a.view({E, r, 64})[e];
  CHECK(max_diff(mine, at::matmul(x, at::matmul(b_e, a_e).t()) * adapter.config().scale()) < 1e-5f);
  // All assignments' deltas at once, experts chosen by a tensor (the device path's): row a is expert experts[a]'s.
  const auto experts = at::tensor(std::vector<int64_t>{2, 0, 3, 2, 1}, at::kLong);
  const auto rows = at::randn({5, 64});
  const auto all = adapter.expert_deltas(1, LoraTarget::experts_gate_up, experts, E, rows);
  REQUIRE(all.sizes().vec() == std::vector<int64_t>{5, 64});
  for (int64_t a = 0; a < 5; ++a) {
    const auto one = adapter.plus_expert_delta(1, LoraTarget::experts_gate_up, experts[a].item<int64_t>(), E,
                                               rows.narrow(0, a, 1), at::zeros({1, 64}));
    CHECK(max_diff(all.narrow(0, a, 1), one) < 1e-5f);
  }
  CHECK_THROWS_AS(adapter.expert_deltas(1, LoraTarget::router, experts, E, rows), std::invalid_argument);

  model.use_adapter(&adapter);
  const auto ids = prompt_of(10, 48, 6);
  const auto params = adapter.parameters();  // per layer: q A, q B, router A, router B, gate_up A, B, down A, B
  const auto t = at::tensor(ids, at::kLong).view({1, -1});
  token_logprobs(model, t, at::ones_like(t).to(at::kBool)).logprobs.sum().backward();
  int checked = 0;
  for (const auto& [index, flat] : std::vector<std::pair<std::size_t, int64_t>>{
           {3, 5}, {5, 70}, {5, 200}, {7, 33}, {13, 100}, {15, 7}}) {
    auto p = params[index];
    const double analytic = p.grad().view(-1)[flat].item<double>();
    const double numeric = test::numeric_gradient(model, ids, p, flat);
    CAPTURE(index);
    CAPTURE(flat);
    CHECK(analytic == doctest::Approx(numeric).epsilon(0.05).scale(1.0));
    checked += std::abs(analytic) > 1e-3;
  }
  CHECK(checked >= 3);

  // Saved with PEFT's names (gate_up listed first, so its wrapper is the inner one) and loaded back exactly.
  adapter.save_peft(saved.path());
  const auto file = SafetensorsFile::open(saved.path() / "adapter_model.safetensors");
  CHECK(file->find("base_model.model.model.layers.1.mlp.router.lora_A.weight"));
  CHECK(file->find("base_model.model.model.layers.1.mlp.experts.base_layer.lora_A.weight"));
  CHECK(file->find("base_model.model.model.layers.1.mlp.experts.lora_B.weight"));
  CHECK(file->find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
  const auto loaded = LoraAdapter::load_peft(saved.path(), model.config(), c10::Device(c10::kCPU), at::kFloat);
  CHECK(loaded.find(1, LoraTarget::experts_down)->b.equal(adapter.find(1, LoraTarget::experts_down)->b));
  at::NoGradGuard no_grad;
  const auto with_adapter = model.forward_full(as_batch(ids));
  model.use_adapter(&loaded);
  CHECK(max_diff(model.forward_full(as_batch(ids)), with_adapter) == 0.0f);
  model.use_adapter(nullptr);
  CHECK(max_diff(model.forward_full(as_batch(ids)), with_adapter) > 1e-3f);
  // Only parameters adapted: PEFT then writes no target_modules (null); a parameter named as a module is refused.
  auto peft_config = nlohmann::json::parse(test::read_file(saved.path() / "adapter_config.json"));
  peft_config["target_modules"] = nullptr;
  test::write_file(saved.path() / "adapter_config.json", peft_config.dump());
  const auto experts_only = LoraAdapter::load_peft(saved.path(), model.config(), c10::Device(c10::kCPU), at::kFloat);
  CHECK(experts_only.find(0, LoraTarget::q) == nullptr);
  CHECK(experts_only.find(0, LoraTarget::experts_gate_up) != nullptr);
  peft_config["target_modules"] = {"q_proj", "experts.down_proj"};
  test::write_file(saved.path() / "adapter_config.json", peft_config.dump());
  CHECK_THROWS_AS(LoraAdapter::load_peft(saved.path(), model.config(), c10::Device(c10::kCPU), at::kFloat),
                  ModelFormatError);
  // Names as PEFT's target_parameters or a config give them; a bare word is not a parameter's name.
  CHECK(lora_target_named("mlp.experts.gate_up_proj") == LoraTarget::experts_gate_up);
  CHECK(lora_target_named("experts.down_proj") == LoraTarget::experts_down);
  CHECK(lora_target_named("router.weight") == LoraTarget::router);
  CHECK(lora_target_named("down_proj") == LoraTarget::down);
  CHECK(!lora_target_named("weight"));
  CHECK(!lora_target_named("xperts.down_proj"));
  // A dense model has no experts to adapt.
  const test::ScratchDir qwen_dir("qwen3-noexperts");
  const auto qwen = load_tiny(test::tiny_qwen3(), qwen_dir);
  LoraConfig experts_on_dense;
  experts_on_dense.targets = {LoraTarget::experts_down};
  CHECK_THROWS_AS(LoraAdapter::create(qwen.config(), experts_on_dense, c10::Device(c10::kCPU), at::kFloat, 1),
                  std::invalid_argument);
}

TEST_CASE("gpt-oss LoRA patterns: rank_pattern and alpha_pattern reach the router and experts by their paths") {
  // PEFT matches a parameter target's keys against "model.layers.N.mlp.experts.gate_up_proj" (the module's path and
  // the parameter's name), as it does a module's: the rank is per expert, the scale the pair's own.
  const auto m = test::tiny_gpt_oss();
  const test::ScratchDir dir("gptoss-pattern-lora"), saved("gptoss-pattern-adapter");
  auto model = load_tiny(m, dir, /*mxfp4=*/true);
  auto adapter = random_adapter(model, {LoraTarget::q, LoraTarget::router, LoraTarget::experts_gate_up,
                                        LoraTarget::experts_down},
                                {{"experts.gate_up_proj", 2}, {"layers.1.mlp.router.weight", 3}},
                                {{"experts.down_proj", 16}});
  const int64_t E = 4;
  const auto* gate_up = adapter.find(1, LoraTarget::experts_gate_up);
  REQUIRE(gate_up);
  CHECK(gate_up->a.sizes().vec() == std::vector<int64_t>{2 * E, 64});
  CHECK(gate_up->b.sizes().vec() == std::vector<int64_t>{64, 2 * E});
  CHECK(gate_up->scale == 8.0 / 2);
  CHECK(adapter.find(1, LoraTarget::router)->a.size(0) == 3);
  CHECK(adapter.find(0, LoraTarget::router)->a.size(0) == 4);
  CHECK(adapter.find(0, LoraTarget::experts_down)->a.size(0) == 4 * E);
  CHECK(adapter.find(0, LoraTarget::experts_down)->scale == 16.0 / 4);

  // Expert e's delta at rank 2: B[:, e::E] A[2e : 2e + 2], scaled by alpha / 2.
  const int64_t e = 3, r = 2;
  const auto x = at::randn({3, 64});
  const auto mine = adapter.plus_expert_delta(1, LoraTarget::experts_gate_up, e, E, x, at::zeros({3, 64}));
  const auto b_e = gate_up->b.view({64, r, E}).select(2, e);
  const auto a_e = gate_up->a.view({E, r, 64})[e];
  CHECK(max_diff(mine, at::matmul(x, at::matmul(b_e, a_e).t()) * (8.0 / 2)) < 1e-5f);

  // Saved with the patterns and loaded back to the same logits.
  adapter.save_peft(saved.path());
  const auto loaded = LoraAdapter::load_peft(saved.path(), model.config(), c10::Device(c10::kCPU), at::kFloat);
  CHECK(loaded.find(1, LoraTarget::router)->a.size(0) == 3);
  CHECK(loaded.find(1, LoraTarget::experts_gate_up)->scale == 4.0);
  at::NoGradGuard no_grad;
  const auto ids = prompt_of(10, 48, 6);
  model.use_adapter(&adapter);
  const auto with_adapter = model.forward_full(as_batch(ids));
  model.use_adapter(&loaded);
  CHECK(max_diff(model.forward_full(as_batch(ids)), with_adapter) == 0.0f);
}

TEST_CASE("qwen3 and gpt-oss in bfloat16 stay within 5% of the float32 reference; a float32 adapter trains on them") {
  for (const bool gpt_oss : {false, true}) {
    CAPTURE(gpt_oss);
    const auto m = gpt_oss ? test::tiny_gpt_oss() : test::tiny_qwen3();
    const test::ScratchDir dir("families-bf16");
    test::write_model_dir(m, dir.path(), gpt_oss);
    LoadOptions options;
    options.dtype = at::kBFloat16;
    const auto model = Transformer::load(dir.path(), options);
    const auto ids = prompt_of(15, 48, 8);
    const auto expected = test::reference_logits(m, ids);
    {
      c10::InferenceMode guard;
      const auto logits = model.forward_full(as_batch(ids))[0];
      CHECK((logits.scalar_type() == at::kFloat));
      CHECK(max_diff(logits, expected) < 0.05f * expected.abs().max().item<float>());
      Generator generator(model, [](int64_t) { return std::string(); });
      CHECK(generator.generate({greedy(ids, 6)})[0].tokens.size() == 6);
    }
    auto targets = std::vector<LoraTarget>{LoraTarget::q, LoraTarget::v};
    if (gpt_oss) targets.insert(targets.end(), {LoraTarget::router, LoraTarget::experts_gate_up, LoraTarget::experts_down});
    auto adapter = random_adapter(model, targets);
    model.use_adapter(&adapter);
    const auto t = as_batch(ids);
    token_logprobs(model, t, at::ones_like(t).to(at::kBool)).logprobs.sum().backward();
    for (const auto& p : adapter.parameters()) {
      REQUIRE(p.grad().defined());
      CHECK((p.grad().scalar_type() == at::kFloat));
      CHECK(at::isfinite(p.grad()).all().item<bool>());
    }
  }
}
