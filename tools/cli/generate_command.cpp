// crucible generate: sample completions from a Hugging Face model directory with the built-in LibTorch model.
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "crucible/eval/device.h"
#include "crucible/eval/evaluator.h"
#include "lm/model/language_model.h"
#include "lm/format/safetensors.h"

namespace crucible::cli {
namespace {

struct GenerateArgs {
  std::string model, adapter, prompt, prompt_file, system, device = "cpu", dtype = "auto";
  bool chat = false, json = false, no_graphs = false;
  int64_t n = 1, max_new = 256;
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  uint64_t seed = 0;
  std::vector<std::string> stops;
};

// PEFT names the model an adapter was trained on; a different name is worth a word (shapes that do not fit are
// refused when it loads, but a model of the same shape would take it silently).
void warn_if_adapter_for_another_model(const std::string& adapter, const std::string& model) {
  std::ifstream in(std::filesystem::path(adapter) / "adapter_config.json");
  const auto config = nlohmann::json::parse(in, nullptr, false);
  if (config.is_discarded() || !config.is_object() || !config.contains("base_model_name_or_path") ||
      !config["base_model_name_or_path"].is_string())
    return;
  const std::string base = config["base_model_name_or_path"].get<std::string>();
  auto last = [](std::string p) {
    while (!p.empty() && p.back() == '/') p.pop_back();
    return std::filesystem::path(p).filename().string();
  };
  if (!base.empty() && last(base) != last(model))
    std::cerr << "warning: the adapter " << adapter << " was trained on " << base << ", not " << last(model) << "\n";
}

int generate(const GenerateArgs& a) {
  std::string prompt = a.prompt;
  if (!a.prompt_file.empty()) {
    std::ifstream in(a.prompt_file, std::ios::binary);
    if (!in) {
      std::cerr << "error: cannot read " << a.prompt_file << "\n";
      return 2;
    }
    std::ostringstream s;
    s << in.rdbuf();
    prompt = s.str();
  }
  // The device first: LibTorch's own error for a GPU that is not there is a long trace.
  try {
    const auto device = eval::parse_device(a.device);
    if (device.is_cuda() && device.index >= eval::cuda_devices()) {
      std::cerr << "error: --device " << a.device << ": this machine has " << eval::cuda_devices()
                << " usable CUDA GPUs" << (eval::cuda_devices() == 0 ? " (use --device cpu)" : "") << "\n";
      return 2;
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: --device " << a.device << ": " << e.what() << "\n";
    return 2;
  }
  if (!a.adapter.empty()) warn_if_adapter_for_another_model(a.adapter, a.model);
  lm::LanguageModelOptions options;
  options.device = a.device;
  options.dtype = a.dtype;
  options.cuda_graphs = !a.no_graphs;
  std::unique_ptr<lm::LanguageModel> model;
  try {
    model = std::make_unique<lm::LanguageModel>(lm::LanguageModel::load(a.model, options));
    if (!a.adapter.empty()) model->load_adapter(a.adapter);
    if (a.chat) prompt = model->user_prompt(prompt, a.system);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  std::vector<lm::TextRequest> requests;
  for (int64_t i = 0; i < a.n; ++i) {
    lm::TextRequest r;
    r.prompt = prompt;
    r.temperature = a.temperature;
    r.top_p = a.top_p;
    r.top_k = a.top_k;
    r.seed = a.seed + static_cast<uint64_t>(i);
    r.max_new_tokens = a.max_new;
    r.stop_strings = a.stops;
    requests.push_back(std::move(r));
  }
  std::vector<lm::TextCompletion> out;
  try {
    out = model->generate(requests);
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto& c = out[i];
    if (a.json) {
      nlohmann::json j = {{"index", i},          {"seed", requests[i].seed},
                          {"text", c.text},      {"finish_reason", c.finish_reason},
                          {"prompt_tokens", c.prompt_tokens.size()}, {"tokens", c.tokens},
                          {"sampling_logprobs", c.sampling_logprobs}, {"model_logprobs", c.model_logprobs}};
      std::cout << j.dump() << "\n";
    } else {
      if (a.n > 1) std::cout << "--- completion " << i << " (seed " << requests[i].seed << ", " << c.tokens.size()
                             << " tokens, " << c.finish_reason << ")\n";
      std::cout << c.text << "\n";
    }
  }
  return 0;
}

}  // namespace

Run add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Sample completions from a Hugging Face model directory (Qwen2, Llama)");
  cmd->add_option("--model", args->model, "Model directory: config.json, *.safetensors, tokenizer.json")->required();
  cmd->add_option("--adapter", args->adapter, "A LoRA adapter directory in PEFT's format");
  auto* prompt = cmd->add_option("--prompt", args->prompt, "Prompt text");
  cmd->add_option("--prompt-file", args->prompt_file, "Read the prompt from a file")->excludes(prompt);
  cmd->add_flag("--chat", args->chat, "Wrap the prompt as a user turn in the model's chat format");
  cmd->add_option("--system", args->system, "System prompt for --chat");
  cmd->add_option("-n,--num", args->n, "Completions (seeds seed, seed+1, ...)")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-new", args->max_new, "New tokens at most")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", args->temperature, "0 = greedy (default: generation_config.json, else 1)")
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling mass")->check(CLI::Range(1e-6, 1.0));
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens (0 = off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", args->seed, "Seed of the first completion");
  cmd->add_option("--stop", args->stops, "Stop string (repeatable); the text ends before it");
  cmd->add_option("--device", args->device, "cpu or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto, f32, bf16, f16")->capture_default_str();
  cmd->add_flag("--no-graphs", args->no_graphs, "Decode without CUDA graphs");
  cmd->add_flag("--json", args->json, "One JSON line per completion, with tokens and log-probabilities");
  return [cmd, args]() -> int {
    if (!cmd->parsed()) return -1;
    if (args->prompt.empty() && args->prompt_file.empty()) {
      std::cerr << "error: give --prompt or --prompt-file\n";
      return 2;
    }
    return generate(*args);
  };
}

}  // namespace crucible::cli
