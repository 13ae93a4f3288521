// Qwen3 and gpt-oss on a GPU: the tiny random models of tiny_families.h on CUDA against the CPU reference, and
// decoding there against the CPU model's greedy tokens (gpt-oss's decode steps attend with the split kernels, sinks
// and windows included, and run in CUDA graphs where its packed experts run on the device kernel, moe_kernels.h;
// Qwen3's q/k norms go into the fused rotation where its heads are a multiple of 32). Then the kernels gpt-oss and
// Qwen3 add, each against LibTorch's way.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include "lm/generation/generator.h"
#include "lm/kernels/decode_kernels.h"
#include "lm/kernels/moe_kernels.h"
#include "lm/model/moe.h"
#include "lm/model/mxfp4.h"
#include "lm/model/flash_sink_attention.h"
#include "lm/model/plain_attention.h"
#include "lm/model/transformer.h"
#include "lm/sink_attention_reference.h"
#include "lm/tiny_families.h"

using namespace crucible;
using namespace crucible::lm;

namespace {

std::vector<int64_t> ids_of(int64_t n, int64_t salt) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(1 + (i * 11 + salt * 5) % 47);
  return ids;
}

// 12 new tokens for each prompt, greedy at temperature 0 (else drawn with the same seed each call).
std::vector<Completion> completions_of(const Transformer& model, const std::vector<std::vector<int64_t>>& prompts,
                                       double temperature = 0) {
  Generator generator(model, [](int64_t) { return std::string(); });
  std::vector<GenerationRequest> batch;
  for (const auto& p : prompts) {
    GenerationRequest r;
    r.prompt = p;
    r.sampling.temperature = temperature;
    r.sampling.seed = 5;
    r.max_new_tokens = 12;
    batch.push_back(r);
  }
  return generator.generate(batch);
}

std::vector<std::vector<int64_t>> greedy_tokens(const Transformer& model, const std::vector<std::vector<int64_t>>& prompts) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& c : completions_of(model, prompts)) out.push_back(c.tokens);
  return out;
}

Transformer load_on_gpu(const std::filesystem::path& dir, c10::ScalarType dtype) {
  LoadOptions options;
  options.device = c10::Device("cuda:0");
  options.dtype = dtype;
  return Transformer::load(dir, options);
}

// Random experts in one of the kernels' test shapes, packed as MXFP4: rows scaled by 0.2, or (largest_power > 0) by
// 2^-6 .. 2^largest_power, so that scales above 128 (two multiplications a pair) meet small ones in one warp. On the
// GPU the codes are in the kernels' order (mxfp4.h) and the scales a view one byte into their storage: the kernels
// read them as aligned words, from before their start.
struct ExpertShape {
  int64_t experts, rows, cols;
  int64_t largest_power = 0;
};

struct PackedExperts {
  Mxfp4Tensor packed;
  at::Tensor blocks, scales;  // on the GPU
};

// The scales start one byte into their storage unless `scales_aligned` (then where the allocator puts them).
PackedExperts random_packed_experts(const ExpertShape& shape, at::Generator& g, bool scales_aligned = false) {
  const int64_t E = shape.experts, rows = shape.rows, cols = shape.cols;
  const c10::Device gpu("cuda:0");
  const auto row_scale = shape.largest_power == 0
                             ? at::full({E, rows, 1}, 0.2)
                             : at::pow(2.0, at::randint(-6, shape.largest_power + 1, {E, rows, 1}, g).to(at::kFloat));
  PackedExperts p{lm::mxfp4_encode(at::randn({E, rows, cols}, g) * row_scale), {}, {}};
  p.blocks = lm::mxfp4_paired(p.packed.blocks).to(gpu);
  if (scales_aligned) {
    p.scales = p.packed.scales.to(gpu);
    return p;
  }
  p.scales = at::zeros({p.packed.scales.numel() + 1}, p.packed.scales.options().device(gpu))
                 .narrow(0, 1, p.packed.scales.numel())
                 .copy_(p.packed.scales.flatten().to(gpu))
                 .view(p.packed.scales.sizes());
  return p;
}

}  // namespace

TEST_CASE("lm gpu: qwen3 and gpt-oss on CUDA match the CPU reference (float32) and the CPU model's greedy tokens") {
  c10::InferenceMode guard;
  // Qwen3 with heads of 16 (its norms in LibTorch's operators) and of 32 (in the fused rotation), then gpt-oss.
  for (const int variant : {0, 1, 2}) {
    const bool gpt_oss = variant == 2;
    CAPTURE(variant);
    const auto m = gpt_oss ? test::tiny_gpt_oss() : test::tiny_qwen3(1, variant == 1 ? 32 : 16);
    if (variant == 1)  // the decode steps below take the fused rotation with the norms
      REQUIRE(rotate_into_cache_serves(at::zeros({1}, at::TensorOptions().device(c10::kCUDA).dtype(at::kBFloat16)),
                                       32, /*normalised_heads=*/true));
    const test::ScratchDir dir("families-gpu");
    test::write_model_dir(m, dir.path(), gpt_oss);
    const auto cpu = Transformer::load(dir.path());
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      CAPTURE(dtype == at::kFloat);
      const auto gpu = load_on_gpu(dir.path(), dtype);
      const auto ids = ids_of(19, 3);
      const auto expected = test::reference_logits(m, ids);
      const auto logits = gpu.forward_full(at::tensor(ids, at::kLong).view({1, -1}))[0].cpu();
      const float tolerance = dtype == at::kFloat ? 1e-3f : 0.05f * expected.abs().max().item<float>();
      CHECK((logits - expected).abs().max().item<float>() < tolerance);
      // Prompts of 1, 4 and 9 tokens left-padded together, 12 steps: decode steps far past the 3-token window. In
      // bfloat16 the decode step takes the fused kernels' inputs (valid slots, no mask), which the sink and window
      // attention turns into its own mask: it must decode every token; float32 must give the CPU's tokens.
      const std::vector<std::vector<int64_t>> prompts = {ids_of(1, 1), ids_of(4, 2), ids_of(9, 3)};
      const auto tokens = greedy_tokens(gpu, prompts);
      for (const auto& row : tokens) CHECK(row.size() == 12);
      if (dtype == at::kFloat) CHECK(tokens == greedy_tokens(cpu, prompts));
      // One prompt: one-row steps (the one-row kernels; gpt-oss's norm in its router's kernel and its residual in
      // the experts' sum).
      const std::vector<std::vector<int64_t>> single = {ids_of(6, 4)};
      const auto alone = greedy_tokens(gpu, single);
      CHECK(alone.front().size() == 12);
      if (dtype == at::kFloat) CHECK(alone == greedy_tokens(cpu, single));
      // A one-row pass with the one-row kernels (gpt-oss: the norm in the router's kernel, the residual in the
      // experts' sum) against the same pass through LibTorch's norm, cuBLAS and the add.
      const auto one = at::tensor(ids_of(1, 5), at::kLong).view({1, 1});
      const auto folded = gpu.forward_full(one)[0].to(at::kFloat).cpu();
      set_small_linear(false);
      const auto plain = gpu.forward_full(one)[0].to(at::kFloat).cpu();
      set_small_linear(true);
      const float one_row_tolerance = dtype == at::kFloat ? 1e-4f : 0.05f;
      CHECK((folded - plain).abs().max().item<float>() <= one_row_tolerance * (plain.abs().max().item<float>() + 1));
    }
  }
}

TEST_CASE("lm gpu: gpt-oss's sampled log-probs equal a whole-sequence pass's (float32; bfloat16's gap reported)") {
  // Decode steps on the device kernels (experts, router, sinks and windows, CUDA graphs) against the teacher-forced
  // pass a trainer makes. In bfloat16 the two paths round differently (the experts' kernels sum in float32), and a
  // random router's near ties then choose other experts: the gap is reported, not bounded.
  c10::InferenceMode guard;
  const auto m = test::tiny_gpt_oss();
  const test::ScratchDir dir("families-gpu-logprobs");
  test::write_model_dir(m, dir.path(), /*mxfp4=*/true);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype == at::kFloat);
    const auto model = load_on_gpu(dir.path(), dtype);
    Generator generator(model, [](int64_t) { return std::string(); });
    std::vector<GenerationRequest> batch;
    for (const int64_t n : {1, 6, 13}) {
      GenerationRequest r;
      r.prompt = ids_of(n, n);
      r.sampling.temperature = 1.0;
      r.sampling.seed = static_cast<uint64_t>(n);
      r.max_new_tokens = 10;
      batch.push_back(r);
    }
    const auto completions = generator.generate(batch);
    double largest = 0, sum = 0;
    int64_t count = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto& c = completions[i];
      REQUIRE(c.model_logprobs.size() == c.tokens.size());
      auto seq = batch[i].prompt;
      seq.insert(seq.end(), c.tokens.begin(), c.tokens.end());
      const auto lp = at::log_softmax(model.forward_full(at::tensor(seq, at::kLong).view({1, -1}))[0].to(at::kFloat), -1).cpu();
      const auto P = static_cast<int64_t>(batch[i].prompt.size());
      for (std::size_t k = 0; k < c.tokens.size(); ++k) {
        const double d = std::abs(c.model_logprobs[k] - lp[P - 1 + static_cast<int64_t>(k)][c.tokens[k]].item<float>());
        largest = std::max(largest, d), sum += d, ++count;
      }
    }
    MESSAGE("sampler against a whole-sequence pass: largest " << largest << ", mean " << sum / count);
    if (dtype == at::kFloat) CHECK(largest < 1e-3);
  }
}

TEST_CASE("lm gpu: gpt-oss decode steps of more than 256 assignments give the same tokens in CUDA graphs as without") {
  // 130 rows x 2 experts: the tensor cores' ordered assignments (a sort and offsets on the device) inside a captured
  // decode step, against the same steps run eagerly.
  c10::InferenceMode guard;
  const auto m = test::tiny_gpt_oss();
  const test::ScratchDir dir("families-gpu-ordered-graphs");
  test::write_model_dir(m, dir.path(), /*mxfp4=*/true);
  const auto model = load_on_gpu(dir.path(), at::kBFloat16);
  REQUIRE(model.experts_stay_on_device(130));
  std::vector<std::vector<int64_t>> runs[2];
  for (const bool graphs : {true, false}) {
    GeneratorOptions options;
    options.cuda_graphs = graphs;
    Generator generator(model, [](int64_t) { return std::string(); }, options);
    std::vector<GenerationRequest> batch;
    for (int64_t i = 0; i < 130; ++i) {
      GenerationRequest r;
      r.prompt = ids_of(1 + i % 9, i);
      r.sampling.temperature = 0;
      r.max_new_tokens = 4;
      batch.push_back(r);
    }
    for (const auto& c : generator.generate(batch)) runs[graphs ? 0 : 1].push_back(c.tokens);
  }
  CHECK(runs[0] == runs[1]);
}

TEST_CASE("lm gpu: experts read from MXFP4 by the device kernel give LibTorch's decoded experts' values") {
  c10::InferenceMode guard;
  const c10::Device gpu("cuda:0");
  struct Shape {
    int64_t experts, hidden, intermediate;
    std::vector<int64_t> tokens;
  };
  // Few experts and rows shorter than a warp's step; then more experts than a decode step's assignments (the kernel
  // goes by assignment) and rows of several steps, the last one partial.
  // 64 tokens are the CUDA-core kernel's most (256 assignments): 65 and 300 take LibTorch's path in float32 and the
  // tensor cores' ordered assignments in bfloat16.
  for (const Shape& shape : {Shape{8, 96, 64, {1, 3, 64, 65, 300, 520}}, Shape{32, 1056, 544, {1, 2, 9, 64, 300}}}) {
    const int64_t E = shape.experts, hidden = shape.hidden, I = shape.intermediate;
    CAPTURE(E);
    auto g = at::make_generator<at::CPUGeneratorImpl>(7);
    MoeConfig config{E, 4, 7.0, 1.702};
    MoeWeights w;
    const auto router = at::randn({E, hidden}, g) * 0.3, router_bias = at::randn({E}, g) * 0.1;
    const auto gate_up = lm::mxfp4_encode(at::randn({E, 2 * I, hidden}, g) * 0.2);
    const auto down = lm::mxfp4_encode(at::randn({E, hidden, I}, g) * 0.2);
    w.gate_up.blocks = lm::mxfp4_paired(gate_up.blocks).to(gpu);  // an ExpertMatrix's order (mxfp4.h)
    w.gate_up.scales = gate_up.scales.to(gpu);
    w.down.blocks = lm::mxfp4_paired(down.blocks.to(gpu));  // the same, the order changed on the GPU
    w.down.scales = down.scales.to(gpu);
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      CAPTURE(dtype == at::kFloat);
      w.router = router.to(gpu, dtype);
      w.router_bias = router_bias.to(gpu, dtype);
      w.gate_up_bias = (at::randn({E, 2 * I}, g) * 0.1).to(gpu, dtype);
      w.down_bias = (at::randn({E, hidden}, g) * 0.1).to(gpu, dtype);
      for (const int64_t tokens : shape.tokens) {
        CAPTURE(tokens);
        const auto x = at::randn({tokens, hidden}, g).to(gpu, dtype);
        set_expert_kernels(false);
        const auto expected = moe_forward(w, config, x, nullptr, 0).to(at::kFloat);
        set_expert_kernels(true);
        const auto products = expert_products_for(x, dtype);
        CHECK(expert_gemv_serves(x, w.gate_up.blocks, w.gate_up.scales, tokens * 4, products) ==
              (tokens <= 64 || products == ExpertProducts::bfloat16));
        // The device kernel on every pass it serves; by default a pass whose experts average 256 assignments or
        // more takes the decoded experts (520 tokens of 8 experts: 260 each).
        CHECK(experts_run_on_device(w, x, tokens * 4) ==
              (expert_gemv_serves(x, w.gate_up.blocks, w.gate_up.scales, tokens * 4, products) &&
               tokens * 4 < kExpertsDecodedFrom * E));
        set_experts_decoded_from(0);
        const auto got = moe_forward(w, config, x, nullptr, 0).to(at::kFloat);
        set_experts_decoded_from(-1);
        const float scale = expected.abs().max().item<float>();
        const float tolerance = dtype == at::kFloat ? 1e-4f * scale : 0.03f * scale;
        CHECK((got - expected).abs().max().item<float>() < tolerance);
      }
    }
  }
}


TEST_CASE("lm gpu: the experts' bfloat16 products on tensor cores are the exact products of bfloat16-rounded inputs") {
  // A decode step of a few tokens (no more assignments than experts) takes a block per assignment.
  c10::InferenceMode guard;
  const c10::Device gpu("cuda:0");
  // Rows ending inside a warp's 16 and columns inside a span of 4 MX blocks; up to E assignments, then 8 inputs a pass
  // (up to 4 an expert), 16 (up to 12) and 32, all on one expert (many passes), more than 256 (ordered, spread and
  // all on one expert; 200 experts, more than a block's threads, count their tiles), with inputs shared k ways (the
  // first projection) or one each, in bfloat16 and float32, rows padded past their columns. 3 x 25 x 96 has 225
  // scales: the last one's aligned word ends past them (copied in part). 16 x 48 x 288 mixes rows of scales above 128
  // with rows of small ones in one warp.
  for (const ExpertShape& shape : {ExpertShape{8, 88, 96}, ExpertShape{32, 200, 1056}, ExpertShape{200, 40, 160},
                                   ExpertShape{3, 25, 96}, ExpertShape{16, 48, 288, 14}}) {
    const int64_t E = shape.experts, rows = shape.rows, cols = shape.cols;
    CAPTURE(E);
    auto g = at::make_generator<at::CPUGeneratorImpl>(11);
    const auto [packed, blocks, scales] = random_packed_experts(shape, g);
    const auto decoded = lm::mxfp4_decode(packed.blocks, packed.scales, at::kFloat).to(at::kDouble);
    const auto bias = (at::randn({E, rows}, g) * 0.1).to(at::kBFloat16);
    // More than 256 assignments go in the order of their experts, found on the device.
    for (const int64_t assignments :
         {int64_t{1}, E, 3 * E, 8 * E, std::min<int64_t>(16 * E, 256), int64_t{-256}, int64_t{1000}, int64_t{-1000}}) {
      const bool one_expert = assignments < 0;
      const int64_t A = one_expert ? -assignments : assignments;
      const auto experts = one_expert ? at::full({A}, E / 2, at::kLong) : at::randint(E, {A}, g, at::kLong);
      for (const int64_t divisor : {int64_t{1}, int64_t{4}}) {
        if (A % divisor != 0) continue;
        for (const auto dtype : {at::kBFloat16, at::kFloat}) {
          CAPTURE(A);
          CAPTURE(divisor);
          CAPTURE(dtype == at::kFloat);
          const auto padded = at::randn({A / divisor, cols + 32}, g).to(dtype);
          const auto x = padded.slice(1, 0, cols);
          const auto inputs = x.to(at::kBFloat16).to(at::kDouble).repeat_interleave(divisor, 0);
          const auto weights = decoded.index_select(0, experts);                                    // [A, rows, cols]
          const auto expected = at::bmm(weights, inputs.unsqueeze(-1)).squeeze(-1) +
                                bias.to(at::kDouble).index_select(0, experts);
          // Ordered assignments in tiles of 32 and of 64 an expert's.
          for (const int tile : {32, 64}) {
            if (tile == 64 && A <= 256) continue;
            CAPTURE(tile);
            set_expert_ordered_tile(tile);
            const auto got = expert_gemv(padded.to(gpu).slice(1, 0, cols), divisor, experts.to(gpu), blocks, scales,
                                         bias.to(gpu), ExpertProducts::bfloat16).cpu().to(at::kDouble);
            set_expert_ordered_tile(0);
            CHECK((got - expected).abs().max().item<double>() < 1e-5 * (1.0 + expected.abs().max().item<double>()));
          }
        }
      }
    }
  }
}

TEST_CASE("lm gpu: one token's experts on their own warps give the bits the same token gets beside another") {
  // One token's first projection takes a warp per 16 rows of each of its k experts (expert_warps.cu); two tokens'
  // take the blocks of expert_mma.cu. Both make each column of the products in the same order, so the token's rows
  // must be equal bit for bit.
  c10::InferenceMode guard;
  const c10::Device gpu("cuda:0");
  // Rows ending inside a warp's 16, columns inside a span of 4 MX blocks, the last scale's aligned word past the
  // scales (3 x 25 x 96), scales above 128 beside small ones in one warp (16 x 48 x 288).
  for (const ExpertShape& shape :
       {ExpertShape{8, 88, 96}, ExpertShape{32, 200, 1056}, ExpertShape{3, 25, 96}, ExpertShape{16, 48, 288, 14}}) {
    const int64_t E = shape.experts, rows = shape.rows, cols = shape.cols;
    CAPTURE(E);
    auto g = at::make_generator<at::CPUGeneratorImpl>(23);
    const auto [packed, blocks, scales] = random_packed_experts(shape, g);
    const auto bias = (at::randn({E, rows}, g) * 0.1).to(at::kBFloat16).to(gpu);
    for (const int64_t k : {int64_t{1}, int64_t{4}, int64_t{8}}) {
      CAPTURE(k);
      const auto experts = at::randint(E, {2 * k}, g, at::kLong).to(gpu);  // an expert may repeat
      const auto x = at::randn({2, cols + 32}, g).to(at::kBFloat16).to(gpu).slice(1, 0, cols);
      const auto alone = expert_gemv(x.narrow(0, 0, 1), k, experts.narrow(0, 0, k), blocks, scales, bias,
                                     ExpertProducts::bfloat16);
      const auto beside = expert_gemv(x, k, experts, blocks, scales, bias, ExpertProducts::bfloat16);
      CHECK(at::equal(alone, beside.narrow(0, 0, k)));
    }
  }
}

TEST_CASE("lm gpu: one token's first projection by bulk copies gives the bits of the warps' own rings") {
  // Where the codes and scales are 16-byte aligned and a warp's 16 rows whole, bulk copies bring each row's codes 4
  // spans at a time; the lanes multiply the same blocks in the same order, so the products must be equal bit for bit
  // to the rings' and to the same token's beside another (expert_mma.cu's blocks).
  c10::InferenceMode guard;
  const c10::Device gpu("cuda:0");
  set_expert_epilogues(true);
  // gpt-oss's 2,880 columns (90 MX blocks: 5 chunks of 16 and one of 10, the last span 2 blocks), 33 blocks (a chunk
  // of one block), one chunk of 9 blocks with scales above 128 beside small ones, and exactly one span.
  for (const ExpertShape& shape : {ExpertShape{8, 64, 2880}, ExpertShape{6, 96, 1056}, ExpertShape{16, 48, 288, 14},
                                   ExpertShape{4, 32, 128}}) {
    const int64_t E = shape.experts, rows = shape.rows, cols = shape.cols;
    CAPTURE(E);
    CAPTURE(cols);
    auto g = at::make_generator<at::CPUGeneratorImpl>(29);
    const auto [packed, blocks, scales] = random_packed_experts(shape, g, /*scales_aligned=*/true);
    if (!expert_bulk_copies_serve(blocks, scales)) {
      MESSAGE("skipped: bulk copies are switched off (CRUCIBLE_MOE_BULK=0, CRUCIBLE_MOE_WARPS=0), or this GPU or build "
              "lacks compute capability 9.0");
      return;
    }
    // The rings' tests' layouts are refused: scales a byte into their storage, rows ending inside a warp's 16.
    CHECK_FALSE(expert_bulk_copies_serve(blocks, random_packed_experts(shape, g).scales));
    const auto ragged = random_packed_experts({E, rows - 8, cols}, g, /*scales_aligned=*/true);
    CHECK_FALSE(expert_bulk_copies_serve(ragged.blocks, ragged.scales));
    const auto bias = (at::randn({E, rows}, g) * 0.1).to(at::kBFloat16).to(gpu);
    const SwigluClamp clamp{7.0, 1.702};
    for (const int64_t k : {int64_t{1}, int64_t{4}, int64_t{8}}) {
      CAPTURE(k);
      const auto experts = at::randint(E, {2 * k}, g, at::kLong).to(gpu);  // an expert may repeat
      const auto x = at::randn({2, cols + 32}, g).to(at::kBFloat16).to(gpu).slice(1, 0, cols);
      const auto one = experts.narrow(0, 0, k);
      const auto bulk = expert_gemv(x.narrow(0, 0, 1), k, one, blocks, scales, bias, ExpertProducts::bfloat16);
      const auto bulk_swiglu = expert_gemv_swiglu(x.narrow(0, 0, 1), k, one, blocks, scales, bias, clamp);
      set_expert_bulk_copies(false);
      const auto rings = expert_gemv(x.narrow(0, 0, 1), k, one, blocks, scales, bias, ExpertProducts::bfloat16);
      const auto rings_swiglu = expert_gemv_swiglu(x.narrow(0, 0, 1), k, one, blocks, scales, bias, clamp);
      set_expert_bulk_copies(true);
      const auto beside = expert_gemv(x, k, experts, blocks, scales, bias, ExpertProducts::bfloat16);
      CHECK(at::equal(bulk, rings));
      CHECK(at::equal(bulk, beside.narrow(0, 0, k)));
      CHECK(at::equal(bulk_swiglu, rings_swiglu));
    }
  }
}

TEST_CASE("lm gpu: the experts' epilogues give their glue kernels' values: the clamped SwiGLU, one token's sum") {
  // Bit for bit: each epilogue computes what its glue kernel computes from the kernel's float32 sums.
  c10::InferenceMode guard;
  const c10::Device gpu("cuda:0");
  set_expert_epilogues(true);
  REQUIRE(expert_epilogues_serve(ExpertProducts::bfloat16));
  const SwigluClamp clamp{7.0, 1.702};
  struct Shape {
    int64_t experts, rows, cols;
  };
  // Rows ending inside a warp's 16 and a block's 64, columns inside a span of 4 MX blocks, gpt-oss's 8 experts a
  // token at most.
  for (const Shape& shape : {Shape{8, 88, 96}, Shape{32, 200, 1056}, Shape{4, 130, 160}, Shape{12, 64, 288}}) {
    const int64_t E = shape.experts, rows = shape.rows, cols = shape.cols;
    CAPTURE(E);
    auto g = at::make_generator<at::CPUGeneratorImpl>(17);
    const auto packed = lm::mxfp4_encode(at::randn({E, rows, cols}, g) * 0.3);
    const auto blocks = lm::mxfp4_paired(packed.blocks).to(gpu);
    const auto scales = packed.scales.to(gpu);
    const auto bias = (at::randn({E, rows}, g) * 2.0).to(at::kBFloat16).to(gpu);  // some sums past the clamp
    // The first projection: one token's 4, a pass of a few an expert, and an ordered pass.
    for (const int64_t assignments : {int64_t{4}, 3 * E, int64_t{300}}) {
      CAPTURE(assignments);
      const auto experts = at::randint(E, {assignments}, g, at::kLong).to(gpu);
      const auto x = (at::randn({assignments / 4, cols}, g) * 2.0).to(at::kBFloat16).to(gpu);
      const auto sums = expert_gemv(x, 4, experts, blocks, scales, bias, ExpertProducts::bfloat16);
      const auto want = clamped_swiglu_on_device(sums, clamp.limit, clamp.alpha, at::kBFloat16);
      const auto got = expert_gemv_swiglu(x, 4, experts, blocks, scales, bias, clamp);
      CHECK(at::equal(got, want));
    }
    // The second projection of one token's k experts (clusters of 1 to 8 blocks), weighted and summed, with and
    // without a residual, in bfloat16, float16 and float32 (the weights in float32 where the output is).
    if (!expert_sum_fuses(blocks, 1, 1, E, ExpertProducts::bfloat16)) {
      MESSAGE("skipped: the summed epilogue needs compute capability 9.0 (clusters)");
      continue;
    }
    for (const int64_t k : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{7}, int64_t{8}}) {
      if (k > E) continue;
      CAPTURE(k);
      REQUIRE(expert_sum_fuses(blocks, 1, k, E, ExpertProducts::bfloat16));
      const auto experts = at::randperm(E, g, at::kLong).narrow(0, 0, k).contiguous().to(gpu);
      const auto x = at::randn({k, cols}, g).to(at::kBFloat16).to(gpu);
      const auto routed = at::softmax(at::randn({1, k}, g), -1);
      for (const auto dtype : {at::kBFloat16, at::kHalf, at::kFloat})
        for (const bool with_residual : {false, true}) {
          const auto weights = routed.to(dtype == at::kFloat ? at::kFloat : at::kBFloat16).to(gpu);
          CAPTURE(dtype == at::kFloat);
          CAPTURE(with_residual);
          const auto residual = with_residual ? at::randn({1, rows}, g).to(dtype).to(gpu) : at::Tensor();
          const auto sums = expert_gemv(x, 1, experts, blocks, scales, bias, ExpertProducts::bfloat16);
          const auto want = weighted_expert_sum(sums, weights, dtype, residual);
          const auto got = expert_gemv_summed(x, experts, blocks, scales, bias, weights, dtype, residual);
          CHECK(at::equal(got, want));
        }
    }
    CHECK_FALSE(expert_sum_fuses(blocks, 2, 4, E, ExpertProducts::bfloat16));  // one token only
    CHECK_FALSE(expert_sum_fuses(blocks, 1, 9, E, ExpertProducts::bfloat16));
  }
  // The chain a decode step runs: the summed kernel launched right after the one that writes its input (it copies
  // its weights before it waits for that one).
  if (expert_sum_fuses(at::zeros({1}, at::TensorOptions().device(gpu)), 1, 4, 12, ExpertProducts::bfloat16)) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(19);
    const int64_t E = 12, hidden = 96, I = 64;
    const auto up = lm::mxfp4_encode(at::randn({E, 2 * I, hidden}, g) * 0.3);
    const auto down = lm::mxfp4_encode(at::randn({E, hidden, I}, g) * 0.3);
    const auto up_blocks = lm::mxfp4_paired(up.blocks).to(gpu), up_scales = up.scales.to(gpu);
    const auto down_blocks = lm::mxfp4_paired(down.blocks).to(gpu), down_scales = down.scales.to(gpu);
    const auto up_bias = at::randn({E, 2 * I}, g).to(at::kBFloat16).to(gpu);
    const auto down_bias = at::randn({E, hidden}, g).to(at::kBFloat16).to(gpu);
    const auto x = at::randn({1, hidden}, g).to(at::kBFloat16).to(gpu);
    const auto residual = at::randn({1, hidden}, g).to(at::kBFloat16).to(gpu);
    const auto weights = at::softmax(at::randn({1, 4}, g), -1).to(at::kBFloat16).to(gpu);
    const auto experts = at::randperm(E, g, at::kLong).narrow(0, 0, 4).contiguous().to(gpu);
    const auto glued_hidden = clamped_swiglu_on_device(
        expert_gemv(x, 4, experts, up_blocks, up_scales, up_bias, ExpertProducts::bfloat16), clamp.limit, clamp.alpha,
        at::kBFloat16);
    const auto want = weighted_expert_sum(
        expert_gemv(glued_hidden, 1, experts, down_blocks, down_scales, down_bias, ExpertProducts::bfloat16), weights,
        at::kBFloat16, residual);
    for (int run = 0; run < 20; ++run) {
      const auto folded_hidden = expert_gemv_swiglu(x, 4, experts, up_blocks, up_scales, up_bias, clamp);
      const auto got = expert_gemv_summed(folded_hidden, experts, down_blocks, down_scales, down_bias, weights,
                                          at::kBFloat16, residual);
      CHECK(at::equal(got, want));
    }
  }
  // Switched off, the layer runs its glue kernels: the same greedy tokens either way in a bfloat16 gpt-oss.
  const auto m = test::tiny_gpt_oss();
  const test::ScratchDir dir("families-gpu-epilogues");
  test::write_model_dir(m, dir.path(), /*mxfp4=*/true);
  const auto model = load_on_gpu(dir.path(), at::kBFloat16);
  const auto folded = greedy_tokens(model, {ids_of(9, 1)});
  set_expert_epilogues(false);
  CHECK_FALSE(expert_epilogues_serve(ExpertProducts::bfloat16));
  const auto glued = greedy_tokens(model, {ids_of(9, 1)});
  set_expert_epilogues(true);
  CHECK(folded == glued);
  CHECK_FALSE(expert_epilogues_serve(ExpertProducts::float32));
}

TEST_CASE("lm gpu: MXFP4 decoded on the GPU gives the CPU's values for every code byte and scale") {
  c10::InferenceMode guard;
  // Block b holds bytes 16 b .. 16 b + 15 (mod 256) and scale b: every byte under many scales, up to 2^127 (6 times
  // that overflows to inf, as it does on the CPU), and scale 0 (2^-127, a subnormal).
  const auto blocks = (at::arange(255 * 16, at::kInt) % 256).to(at::kByte).view({5, 51, 16});
  const auto scales = at::arange(255, at::kInt).to(at::kByte).view({5, 51});
  const auto gpu_blocks = blocks.to(c10::Device("cuda:0")), gpu_scales = scales.to(c10::Device("cuda:0"));
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype == at::kFloat);
    CHECK(mxfp4_decode_serves(gpu_blocks, gpu_scales, dtype));
    const auto expected = lm::mxfp4_decode(blocks, scales, dtype).to(at::kFloat);
    // Stored codes are put in the kernel's paired order on the GPU first; paired ones go straight to it.
    const auto got = lm::mxfp4_decode(gpu_blocks, gpu_scales, dtype).cpu().to(at::kFloat);
    const auto paired = lm::mxfp4_paired(gpu_blocks);
    CHECK(at::equal(lm::mxfp4_decode(paired, gpu_scales, dtype, lm::CodeOrder::paired).cpu().to(at::kFloat), got));
    CHECK(at::equal(lm::mxfp4_stored(paired).cpu(), blocks));
    REQUIRE(got.sizes() == expected.sizes());
    const auto got_blocks = got.view({-1, 32}), expected_blocks = expected.view({-1, 32});
    CHECK(at::equal(got_blocks.slice(0, 1), expected_blocks.slice(0, 1)));
    CHECK(at::equal(got_blocks[0], expected_blocks[0]));  // scale 0
    CHECK(at::equal(at::signbit(got), at::signbit(expected)));  // -0 stays -0
  }
}

TEST_CASE("lm gpu: decode attention with sinks and a sliding window gives the masked softmax with a sink column") {
  c10::InferenceMode guard;
  const c10::Device gpu("cuda:0");
  auto g = at::make_generator<at::CPUGeneratorImpl>(11);
  const int64_t H = 8, Hkv = 2, D = 64;
  const double scale = 0.125;
  const auto sinks = (at::randn({H}, g) * 2).to(gpu);
  struct Span {
    int64_t capacity, visible, slot, long_window;
  };
  // The second: a window whose first tile is odd (half a mask word) and a step's own tile past the first stages.
  for (const Span span : {Span{512, 300, 299, 128}, Span{1536, 1200, 1199, 890}}) {
    const int64_t capacity = span.capacity, visible = span.visible, slot = span.slot;
    CAPTURE(slot);
    const auto slot_tensor = at::tensor(std::vector<int64_t>{slot}, at::kLong).to(gpu);
    const auto slots = at::arange(visible, at::TensorOptions().dtype(at::kLong).device(gpu));
    for (const auto dtype : {at::kFloat, at::kBFloat16})
    for (const bool tensor_cores : {true, false}) {
      // In bfloat16 the tensor-core kernel takes 5 and 40 rows (10 and 80 blocks of a row and key head; a window
      // skips whole tiles before it, the sink joins its final merge); the split kernels take float32, one row, and
      // bfloat16 with it off (splits wholly before a window are skipped, and the combine reads from the first in it).
      set_decode_attention_tensor_cores(tensor_cores);
      for (const int64_t B : {1, 5, 40}) {
        CAPTURE(dtype == at::kFloat);
        CAPTURE(tensor_cores);
        CAPTURE(B);
        const auto q = at::randn({B, 1, H, D}, g).to(gpu, dtype);
        const auto k = at::randn({B, Hkv, capacity, D}, g).to(gpu, dtype);
        const auto v = at::randn({B, Hkv, capacity, D}, g).to(gpu, dtype);
        auto valid = (at::rand({B, capacity}, g) > 0.2).to(gpu);
        valid.narrow(0, 0, 1).narrow(1, 0, 50).fill_(false);  // row 0 left-padded
        REQUIRE(decode_attention_serves_sinks(k, H));
        for (const bool with_sinks : {false, true})
          for (const int64_t window : {int64_t{0}, int64_t{7}, span.long_window}) {
            if (!with_sinks && window == 0) continue;
            CAPTURE(with_sinks);
            CAPTURE(window);
            auto allowed = valid.narrow(1, 0, visible).clone();
            allowed.select(1, slot).fill_(true);
            allowed = allowed & (slots <= slot).view({1, visible});
            if (window > 0) allowed = allowed & (slots > slot - window).view({1, visible});
            const at::Tensor s = with_sinks ? sinks : at::Tensor();
            const auto expected =
                plain_attention(q, k, v, allowed.view({B, 1, 1, visible}), s, scale, visible).to(at::kFloat);
            const auto got = decode_attention(q, k, v, valid, slot_tensor, visible, scale, s, window).to(at::kFloat);
            REQUIRE(got.sizes() == expected.sizes());
            // bfloat16: LibTorch rounds the weights before the values' product, the kernel once at the end.
            const double tolerance = dtype == at::kFloat ? 2e-5 : 2e-2;
            CHECK(((got - expected).abs() <= expected.abs().clamp_min(1.0) * tolerance).all().item<bool>());
          }
      }
    }
  }
  set_decode_attention_tensor_cores(true);
}

TEST_CASE("lm gpu: the attention kernel's own rotation gives the rotation kernel's caches and the attention's bits") {
  c10::InferenceMode guard;
  const c10::Device gpu("cuda:0");
  auto g = at::make_generator<at::CPUGeneratorImpl>(23);
  set_rotation_fold(true);
  struct Heads {
    int64_t H, Hkv, D, B;
  };
  // gpt-oss's group of 8 query heads a key head (its 64-wide heads) at batch 1 and 3, and 128-wide heads in twos.
  for (const Heads heads : {Heads{32, 4, 64, 1}, Heads{32, 4, 64, 3}, Heads{8, 4, 128, 2}}) {
    const int64_t H = heads.H, Hkv = heads.Hkv, D = heads.D, B = heads.B, capacity = 1024, table_rows = 2048;
    CAPTURE(D);
    CAPTURE(B);
    for (const auto dtype : {at::kBFloat16, at::kHalf}) {
      CAPTURE(dtype == at::kHalf);
      const auto qkv = at::randn({B, 1, (H + 2 * Hkv) * D}, g).to(gpu, dtype);
      const auto cos = at::randn({table_rows, D}, g).to(gpu, dtype), signed_sin = at::randn({table_rows, D}, g).to(gpu, dtype);
      const auto positions = at::randint(table_rows, {B, 1}, g, at::kLong).to(gpu);
      const auto k_before = at::randn({B, Hkv, capacity, D}, g).to(gpu, dtype);
      const auto v_before = at::randn({B, Hkv, capacity, D}, g).to(gpu, dtype);
      auto valid = (at::rand({B, capacity}, g) > 0.2).to(gpu);
      const auto sinks = at::randn({H}, g).to(gpu);
      REQUIRE(rotation_folds_into_attention(k_before, H, /*normalised_heads=*/false));
      CHECK_FALSE(rotation_folds_into_attention(k_before, H, /*normalised_heads=*/true));
      // The step's own slot in a warp's first tiles (written into its stage) and past them (copied back from the
      // caches: slot 1000 with no window or one of 900), with and without gpt-oss's sinks, with windows of 7 and 128
      // (the own tile among the first ones counted from the window's).
      for (const int64_t slot : {int64_t{20}, int64_t{1000}})
        for (const int64_t window : {int64_t{0}, int64_t{7}, int64_t{128}, int64_t{900}})
        for (const bool with_sinks : {false, true}) {
          CAPTURE(slot);
          CAPTURE(window);
          CAPTURE(with_sinks);
          const auto slot_tensor = at::tensor(std::vector<int64_t>{slot}, at::kLong).to(gpu);
          const int64_t visible = slot + 3;
          const at::Tensor s = with_sinks ? sinks : at::Tensor();
          auto k_apart = k_before.clone(), v_apart = v_before.clone();
          const auto q = rotate_into_cache(qkv, positions, slot_tensor, cos, signed_sin, k_apart, v_apart, H, Hkv);
          const auto apart = decode_attention(q, k_apart, v_apart, valid, slot_tensor, visible, 0.125, s, window);
          auto k_folded = k_before.clone(), v_folded = v_before.clone();
          const auto folded = rotate_and_attend(qkv, positions, cos, signed_sin, k_folded, v_folded, valid, slot_tensor,
                                                visible, 0.125, H, s, window);
          CHECK(at::equal(folded, apart));
          CHECK(at::equal(k_folded, k_apart));
          CHECK(at::equal(v_folded, v_apart));
          CHECK_FALSE(at::equal(k_folded, k_before));  // the step's key was written
        }
    }
  }
  // Off, the step takes the rotation kernel; Qwen3's normalised heads always do.
  const auto k = at::zeros({1, 8, 64, 64}, at::TensorOptions().device(gpu).dtype(at::kBFloat16));
  set_rotation_fold(false);
  CHECK_FALSE(rotation_folds_into_attention(k, 64, false));
  set_rotation_fold(true);
  CHECK(rotation_folds_into_attention(k, 64, false));
  // 16-wide heads (the tiny models'), which the tensor-core kernel does not take, keep the rotation kernel.
  CHECK_FALSE(rotation_folds_into_attention(at::zeros({1, 2, 64, 16}, k.options()), 4, false));

  // A bfloat16 gpt-oss of 64-wide heads: the same tokens and the same log-probs to the bit with the rotation in the
  // attention kernel or apart, one prompt and three (sinks, a 3-token window, decode steps in CUDA graphs).
  const auto m = test::tiny_gpt_oss(2, /*wide_heads=*/true);
  const test::ScratchDir dir("families-gpu-rotation-fold");
  test::write_model_dir(m, dir.path(), /*mxfp4=*/true);
  const auto model = load_on_gpu(dir.path(), at::kBFloat16);
  // Its caches' key heads and head width (the capacity does not decide).
  REQUIRE(rotation_folds_into_attention(at::zeros({1, 4, 64, 64}, k.options()), 8, false));
  const std::vector<std::vector<int64_t>> prompts[2] = {{ids_of(9, 1)}, {ids_of(1, 1), ids_of(4, 2), ids_of(9, 3)}};
  for (const auto& batch : prompts) {
    CAPTURE(batch.size());
    const auto folded = completions_of(model, batch, /*temperature=*/1.0);
    set_rotation_fold(false);
    const auto apart = completions_of(model, batch, /*temperature=*/1.0);
    set_rotation_fold(true);
    REQUIRE(folded.size() == apart.size());
    for (std::size_t i = 0; i < folded.size(); ++i) {
      CHECK(folded[i].tokens.size() == 12);
      CHECK(folded[i].tokens == apart[i].tokens);
      CHECK(folded[i].model_logprobs == apart[i].model_logprobs);
    }
  }
}

TEST_CASE("lm gpu: the experts' glue kernels give LibTorch's clamped SwiGLU and weighted sum") {
  c10::InferenceMode guard;
  const c10::Device gpu("cuda:0");
  auto g = at::make_generator<at::CPUGeneratorImpl>(5);
  const MoeConfig config{8, 4, 7.0, 1.702};
  const auto gate_up = (at::randn({37, 2 * 96}, g) * 5).to(gpu);  // past the limit of 7 both ways
  const auto expected = clamped_swiglu(gate_up, config);
  const auto got = clamped_swiglu_on_device(gate_up, config.swiglu_limit, config.swiglu_alpha);
  REQUIRE(got.sizes() == expected.sizes());
  CHECK((got - expected).abs().max().item<float>() <= 1e-6f * expected.abs().max().item<float>());
  // In bfloat16 for the tensor cores' second projection: the float32 result rounded once.
  const auto rounded = clamped_swiglu_on_device(gate_up, config.swiglu_limit, config.swiglu_alpha, at::kBFloat16);
  REQUIRE((rounded.scalar_type() == at::kBFloat16));
  CHECK(at::equal(rounded, got.to(at::kBFloat16)));

  const auto experts_out = at::randn({37 * 4, 96}, g).to(gpu);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype == at::kFloat);
    const auto weights = at::softmax(at::randn({37, 4}, g), -1).to(gpu, dtype);
    const auto want = (experts_out.view({37, 4, 96}) * weights.to(at::kFloat).unsqueeze(-1)).sum(1);
    const auto sum = weighted_expert_sum(experts_out, weights, dtype);
    REQUIRE((sum.scalar_type() == dtype));
    const float tolerance = dtype == at::kFloat ? 1e-5f : 1e-2f;
    CHECK((sum.to(at::kFloat) - want).abs().max().item<float>() <= tolerance * want.abs().max().item<float>());
    // With the residual added in the same kernel: LibTorch's residual + sum, bit for bit.
    const auto residual = at::randn({37, 96}, g).to(gpu, dtype);
    CHECK(at::equal(weighted_expert_sum(experts_out, weights, dtype, residual), residual + sum));
  }
}

TEST_CASE("lm gpu: the router's top-k kernel picks LibTorch's top logits, equals by the lower index, and their softmax") {
  c10::InferenceMode guard;
  const c10::Device gpu("cuda:0");
  auto g = at::make_generator<at::CPUGeneratorImpl>(3);
  for (const int64_t E : {32, 128, 200}) {
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      CAPTURE(E);
      CAPTURE(dtype == at::kFloat);
      const auto logits = (at::randn({70, E}, g) * 3).to(gpu, dtype);
      REQUIRE(route_kernel_serves(logits, 4));
      const auto [experts, weights] = route_top_k(logits, 4);
      const auto top = at::topk(logits.to(at::kFloat), 4, -1);
      // The chosen logits are the top values, in order (ties may pick other indices of the same value).
      CHECK(at::equal(logits.to(at::kFloat).gather(-1, experts), std::get<0>(top)));
      CHECK(at::allclose(weights.to(at::kFloat), at::softmax(std::get<0>(top), -1), 1e-2, dtype == at::kFloat ? 1e-6 : 1e-2));
      const auto sorted = std::get<0>(at::sort(experts, -1));  // four different experts a token
      CHECK((sorted.narrow(1, 1, 3) > sorted.narrow(1, 0, 3)).all().item<bool>());
    }
  }
  // Equal logits: the lower index first; a row of one value picks experts 0..k-1.
  const auto flat = at::zeros({3, 32}, at::TensorOptions().device(gpu));
  flat.select(0, 1).narrow(0, 20, 5).fill_(2.0f);  // row 1: experts 20-24 tie above the rest
  const auto [experts, weights] = route_top_k(flat, 4);
  const auto cpu = experts.cpu();
  CHECK(cpu[0].equal(at::tensor(std::vector<int64_t>{0, 1, 2, 3})));
  CHECK(cpu[1].equal(at::tensor(std::vector<int64_t>{20, 21, 22, 23})));
  CHECK(at::allclose(weights.cpu(), at::full({3, 4}, 0.25f)));
}

namespace {

// Two sequences of T tokens, the second right-padded from two thirds on: which slots hold tokens [2, T], and which keys
// each query may see [2, 1, T, T] (causal, real keys only, within `window` where it is not 0).
struct PaddedPair {
  at::Tensor valid, allowed;
};

// A sequence length and a window (0: none) to attend with.
struct WindowCase {
  int64_t tokens, window;
};

PaddedPair padded_pair(int64_t T, int64_t window) {
  const auto slots = at::arange(T, at::kLong);
  auto valid = at::ones({2, T}, at::kBool);
  valid.select(0, 1).narrow(0, 2 * T / 3, T - 2 * T / 3).fill_(false);
  const auto causal = (slots.view({1, T}) <= slots.view({T, 1})).view({1, 1, T, T}) & valid.view({2, 1, 1, T});
  return {valid, window > 0 ? sliding_window_mask(causal, slots, window) : causal};
}

// Whether `got` is within `tolerance` of `want`, relative to want's largest magnitude (at least 1); says both.
bool close_to(const at::Tensor& got, const at::Tensor& want, double tolerance) {
  const auto w = want.to(at::kFloat);
  const double err = (got.cpu().to(at::kFloat) - w).abs().max().item<double>();
  MESSAGE("largest difference " << err << " of " << w.abs().max().item<double>());
  return err <= tolerance * std::max(1.0, w.abs().max().item<double>());
}

}  // namespace

TEST_CASE("lm gpu: flash attention with sinks and windows gives the sink softmax, gradients too") {
  // Whole right-padded sequences through the flash kernel, the sinks through each row's log-sum-exp
  // (flash_sink_attention.h), against the double-precision sink softmax on the same rounded inputs. Padding rows
  // differ by design (the kernel lets them see padding keys), so they carry no loss and are not compared.
  const c10::Device gpu("cuda:0");
  const auto probe = at::zeros({1, 16, 2, 64}, at::TensorOptions(gpu).dtype(at::kBFloat16));
  if (!flash_sink_attention_serves(probe, probe.narrow(2, 0, 1))) {
    MESSAGE("skipped: this LibTorch or GPU has no flash kernel with windows");
    return;
  }
  auto g = at::make_generator<at::CPUGeneratorImpl>(7);
  const int64_t B = 2, H = 8, Hkv = 2, D = 64;
  const double scale = 0.125;
  const auto sinks = at::randn({H}, g) * 2;
  for (const WindowCase c : {WindowCase{45, 0}, WindowCase{45, 6}, WindowCase{300, 128}, WindowCase{300, 0}}) {
    const int64_t T = c.tokens, window = c.window;
    const auto pair = padded_pair(T, window);
    // Every query sees its own slot too (as causal_mask has it): a padding query whose window holds only padding keys
    // would otherwise have no key at all, and without a sink its softmax would be NaN (its rows are not compared).
    const auto allowed = pair.allowed | at::eye(T, at::kBool).view({1, 1, T, T});
    const auto kept = pair.valid.view({B, T, 1}).to(at::kDouble);
    for (const auto dtype : {at::kBFloat16, at::kHalf}) {
      for (const bool with_sinks : {true, false}) {
        CAPTURE(dtype == at::kHalf);
        CAPTURE(with_sinks);
        CAPTURE(T);
        CAPTURE(window);
        const auto q = at::randn({B, T, H, D}, g).to(dtype), k = at::randn({B, Hkv, T, D}, g).to(dtype),
                   v = at::randn({B, Hkv, T, D}, g).to(dtype);
        const auto weights = at::randn({B, T, H * D}, g).to(at::kDouble) * kept;
        auto qg = q.to(gpu).detach().requires_grad_(), kg = k.to(gpu).detach().requires_grad_(),
             vg = v.to(gpu).detach().requires_grad_();
        auto sg = sinks.to(gpu, dtype).detach().requires_grad_();
        const auto out = flash_sink_attention(qg, kg.transpose(1, 2), vg.transpose(1, 2),
                                              with_sinks ? sg : at::Tensor(), scale, window);
        REQUIRE(out.defined());
        (out.to(at::kFloat) * weights.to(gpu, at::kFloat)).sum().backward();
        auto qd = q.to(at::kDouble).detach().requires_grad_(), kd = k.to(at::kDouble).detach().requires_grad_(),
             vd = v.to(at::kDouble).detach().requires_grad_();
        // No sinks: a sink of -inf takes no share of any softmax.
        auto sd = (with_sinks ? sinks.to(dtype).to(at::kDouble) : at::full({H}, -INFINITY, at::kDouble))
                      .detach()
                      .requires_grad_();
        const auto expected = test::sink_attention_in_double(qd, kd, vd, allowed, sd, scale);
        (expected * weights).sum().backward();
        auto close = [](const at::Tensor& got, const at::Tensor& want) { return close_to(got, want, 3e-2); };
        CHECK(close(out.detach().cpu().to(at::kDouble) * kept, expected.detach() * kept));
        CHECK(close(qg.grad(), qd.grad()));
        CHECK(close(kg.grad(), kd.grad()));
        CHECK(close(vg.grad(), vd.grad()));
        if (with_sinks) CHECK(close(sg.grad(), sd.grad()));
      }
    }
  }
}

TEST_CASE("lm gpu: attention with sinks and windows on the fused kernel gives the sink softmax, gradients too") {
  // What training and log-prob passes of gpt-oss run: the sinks as one more key (plain_attention.cpp), so the GPU's
  // fused attention computes them with its own backward (the sinks' gradient too). Against a double-precision softmax
  // with a sink column, on the same (rounded) inputs: causal, right-padded, with and without a window shorter than
  // the sequence.
  const c10::Device gpu("cuda:0");
  auto g = at::make_generator<at::CPUGeneratorImpl>(5);
  const int64_t B = 2, H = 8, Hkv = 2, D = 64;
  const double scale = 0.125;
  const auto sinks = at::randn({H}, g) * 2;
  // 45 tokens fit one block of keys; 300 with gpt-oss's window of 128 give rows whose first key blocks are all masked.
  for (const WindowCase c : {WindowCase{45, 0}, WindowCase{45, 6}, WindowCase{300, 128}}) {
    const int64_t T = c.tokens, window = c.window;
    const auto allowed = padded_pair(T, window).allowed;
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      CAPTURE(dtype == at::kFloat);
      CAPTURE(T);
      CAPTURE(window);
      // Inputs rounded to the dtype once; the reference reads the same values in double.
      const auto q = at::randn({B, T, H, D}, g).to(dtype), k = at::randn({B, Hkv, T, D}, g).to(dtype),
                 v = at::randn({B, Hkv, T, D}, g).to(dtype), weights = at::randn({B, T, H * D}, g);
      auto qg = q.to(gpu).detach().requires_grad_(), kg = k.to(gpu).detach().requires_grad_(),
           vg = v.to(gpu).detach().requires_grad_();
      auto sg = sinks.to(gpu, dtype).detach().requires_grad_();
      const auto out = plain_attention(qg, kg, vg, allowed.to(gpu), sg, scale, T);
      (out.to(at::kFloat) * weights.to(gpu)).sum().backward();
      auto qd = q.to(at::kDouble).detach().requires_grad_(), kd = k.to(at::kDouble).detach().requires_grad_(),
           vd = v.to(at::kDouble).detach().requires_grad_();
      auto sd = sinks.to(dtype).to(at::kDouble).detach().requires_grad_();
      const auto expected = test::sink_attention_in_double(qd, kd, vd, allowed, sd, scale);
      (expected * weights.to(at::kDouble)).sum().backward();
      const double tolerance = dtype == at::kFloat ? 1e-4 : 3e-2;
      auto close = [&](const at::Tensor& got, const at::Tensor& want) { return close_to(got, want, tolerance); };
      CHECK(close(out.detach(), expected.detach()));
      CHECK(close(qg.grad(), qd.grad()));
      CHECK(close(kg.grad(), kd.grad()));
      CHECK(close(vg.grad(), vd.grad()));
      CHECK(close(sg.grad(), sd.grad()));
    }
  }
}
