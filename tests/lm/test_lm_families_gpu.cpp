// Qwen3 and gpt-oss on a GPU: the tiny random models of tiny_families.h on CUDA against the CPU reference, and
// decoding there (gpt-oss's attention bypasses the fused decode kernels; Qwen3's q/k norms bypass the fused rotation;
// gpt-oss decodes without CUDA graphs) against the CPU model's greedy tokens.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <doctest/doctest.h>

#include "lm/generation/generator.h"
#include "lm/model/transformer.h"
#include "lm/tiny_families.h"

using namespace crucible;
using namespace crucible::lm;

namespace {

std::vector<int64_t> ids_of(int64_t n, int64_t salt) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(1 + (i * 11 + salt * 5) % 47);
  return ids;
}

std::vector<std::vector<int64_t>> greedy_tokens(const Transformer& model, const std::vector<std::vector<int64_t>>& prompts) {
  Generator generator(model, [](int64_t) { return std::string(); });
  std::vector<GenerationRequest> batch;
  for (const auto& p : prompts) {
    GenerationRequest r;
    r.prompt = p;
    r.sampling.temperature = 0;
    r.max_new_tokens = 12;
    batch.push_back(r);
  }
  std::vector<std::vector<int64_t>> out;
  for (const auto& c : generator.generate(batch)) out.push_back(c.tokens);
  return out;
}

}  // namespace

TEST_CASE("lm gpu: qwen3 and gpt-oss on CUDA match the CPU reference (float32) and the CPU model's greedy tokens") {
  c10::InferenceMode guard;
  for (const bool gpt_oss : {false, true}) {
    CAPTURE(gpt_oss);
    const auto m = gpt_oss ? test::tiny_gpt_oss() : test::tiny_qwen3();
    const test::ScratchDir dir("families-gpu");
    test::write_model_dir(m, dir.path(), gpt_oss);
    const auto cpu = Transformer::load(dir.path());
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      CAPTURE(dtype == at::kFloat);
      LoadOptions options;
      options.device = c10::Device("cuda:0");
      options.dtype = dtype;
      const auto gpu = Transformer::load(dir.path(), options);
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
    }
  }
}
