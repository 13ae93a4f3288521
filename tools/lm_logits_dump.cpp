// lm_logits_dump: Crucible's model on given prompts, for comparison with transformers on the GPU node: the logits at
// every position of each prompt (one forward pass, float32) and its greedy continuation (the cached decode path).
//   lm_logits_dump --model DIR --prompts "1,2,3;4,5,6,7" --new 16 --device cuda:0 --dtype f32|bf16 --out FILE
//                  [--adapter PEFT_DIR [--gradients OUT_DIR]]
// FILE (safetensors): logits_I [T, V] float32 and greedy_I [new] int64 for prompt I. With --adapter the model runs
// with that PEFT adapter; --gradients writes, as a PEFT adapter, the gradients of the first prompt's summed token
// log-probabilities with respect to each A and B.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <CLI/CLI.hpp>
#include <c10/core/InferenceMode.h>

#include <cstdio>
#include <optional>
#include <sstream>

#include "lm/generation/generator.h"
#include "lm/model/lora.h"
#include "lm/training/policy_loss.h"
#include "lm/model/torch_tensors.h"
#include "lm/model/transformer.h"
#include "guarded_main.h"

using namespace crucible::lm;

namespace {

std::vector<std::vector<int64_t>> parse_prompts(const std::string& text) {
  std::vector<std::vector<int64_t>> prompts;
  std::stringstream rows(text);
  for (std::string row; std::getline(rows, row, ';');) {
    std::vector<int64_t> ids;
    std::stringstream cells(row);
    for (std::string cell; std::getline(cells, cell, ',');) {
      std::size_t used = 0;
      try {
        ids.push_back(std::stoll(cell, &used));
      } catch (const std::logic_error&) {
        used = 0;
      }
      if (used == 0 || used != cell.size()) throw std::invalid_argument("prompt id '" + cell + "' is not an integer");
    }
    if (ids.empty()) throw std::invalid_argument("an empty prompt");
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

std::vector<TensorBytes> dump(const Transformer& model, const std::vector<std::vector<int64_t>>& prompts, int64_t n) {
  Generator generator(model, [](int64_t) { return std::string(); });
  std::vector<TensorBytes> out;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto ids = at::tensor(prompts[i], at::kLong).view({1, -1});
    out.push_back(tensor_to_bytes("logits_" + std::to_string(i), model.forward_full(ids)[0].to(at::kFloat)));
    GenerationRequest request;
    request.prompt = prompts[i];
    request.sampling.temperature = 0;
    request.max_new_tokens = n;
    const auto tokens = generator.generate({request})[0].tokens;
    out.push_back(tensor_to_bytes("greedy_" + std::to_string(i), at::tensor(tokens, at::kLong)));
  }
  return out;
}

// The gradients of the prompt's summed log-probabilities, saved in the adapter's own format (names and shapes).
void write_gradients(const Transformer& model, const LoraAdapter& adapter, const std::vector<int64_t>& prompt,
                     const std::string& dir) {
  const auto ids = at::tensor(prompt, at::kLong).view({1, -1}).to(model.options().device);
  token_logprobs(model, ids, at::ones_like(ids).to(at::kBool)).logprobs.sum().backward();
  auto gradients = adapter.clone();
  at::NoGradGuard no_grad;
  const auto from = adapter.parameters(), to = gradients.parameters();
  for (std::size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i].grad());
  gradients.save_peft(dir);
}

}  // namespace

static int run_tool(int argc, char** argv) {
  CLI::App app("lm_logits_dump: logits and greedy continuations of a model directory");
  std::string model_dir, prompts_text, out, device = "cpu", dtype = "f32", adapter_dir, gradients_dir;
  int64_t new_tokens = 16;
  app.add_option("--model", model_dir, "Hugging Face model directory")->required();
  app.add_option("--prompts", prompts_text, "token ids: prompts separated by ';', ids by ','")->required();
  app.add_option("--new", new_tokens, "greedy tokens per prompt");
  app.add_option("--device", device, "cpu or cuda:N");
  app.add_option("--dtype", dtype, "f32 or bf16");
  app.add_option("--out", out, "safetensors file to write")->required();
  app.add_option("--adapter", adapter_dir, "PEFT adapter directory to run with");
  app.add_option("--gradients", gradients_dir, "directory for the adapter's gradients on the first prompt");
  CLI11_PARSE(app, argc, argv);
  LoadOptions options;
  options.device = c10::Device(device);
  options.dtype = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  const auto model = Transformer::load(model_dir, options);
  const auto prompts = parse_prompts(prompts_text);
  std::optional<LoraAdapter> adapter;
  if (!adapter_dir.empty()) {
    adapter = LoraAdapter::load_peft(adapter_dir, model.config(), options.device, options.dtype);
    model.use_adapter(&*adapter);
    if (!gradients_dir.empty()) write_gradients(model, *adapter, prompts[0], gradients_dir);
  }
  c10::InferenceMode guard;
  write_safetensors(out, dump(model, prompts, new_tokens));
  return 0;
}

int main(int argc, char** argv) {
  return crucible::tools::guarded_main("lm_logits_dump", [&] { return run_tool(argc, argv); });
}
