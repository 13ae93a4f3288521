// crucible sft: supervised LoRA training of a model directory on (prompt, completion) JSONL; writes a PEFT adapter.
#include <cmath>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "lm/model/language_model.h"
#include "lm/model/lora.h"
#include "lm/training/sft.h"

namespace crucible::cli {
namespace {

struct SftArgs {
  std::string model, data, out, device = "cpu", dtype = "auto", system, targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";
  lm::SftOptions options;
};

std::vector<lm::LoraTarget> parse_targets(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream s(text);
  for (std::string name; std::getline(s, name, ',');) names.push_back(name);
  return lm::lora_targets_named(names);
}

int sft(SftArgs& a) {
  try {
    a.options.lora.targets = parse_targets(a.targets);
    a.options.system_prompt = a.system;
    const auto examples = lm::read_sft_jsonl(a.data);
    lm::LanguageModelOptions mo;
    mo.device = a.device;
    mo.dtype = a.dtype;
    auto model = lm::LanguageModel::load(a.model, mo);
    const auto report = lm::run_sft(model, examples, a.options, [](const lm::SftProgress& p) {
      std::cout << "step " << p.step << "  train loss " << p.train_loss;
      if (!std::isnan(p.eval_nll)) std::cout << "  held-out NLL " << p.eval_nll;
      std::cout << std::endl;
    });
    model.adapter()->save_peft(a.out, a.model);
    std::cout << "trained on " << report.train_examples << " examples, held out " << report.eval_examples
              << "; held-out NLL per token " << report.eval_nll_before << " -> " << report.eval_nll_after
              << "\nadapter (PEFT format): " << a.out << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace

Run add_sft_command(CLI::App& app) {
  auto args = std::make_shared<SftArgs>();
  auto& o = args->options;
  auto* cmd = app.add_subcommand("sft", "Supervised LoRA training on prompt/completion JSONL; writes a PEFT adapter");
  cmd->add_option("--model", args->model, "Model directory")->required();
  cmd->add_option("--data", args->data, "JSONL: {\"prompt\": ..., \"completion\": ...} per line")->required();
  cmd->add_option("--out", args->out, "Adapter directory to write")->required();
  cmd->add_option("--steps", o.steps, "Optimizer steps")->capture_default_str();
  cmd->add_option("--batch", o.batch_size, "Examples per step")->capture_default_str();
  cmd->add_option("--micro-batch", o.micro_batch, "Examples per forward/backward")->capture_default_str();
  cmd->add_option("--lr", o.learning_rate, "AdamW learning rate")->capture_default_str();
  cmd->add_option("--rank", o.lora.rank, "LoRA rank")->capture_default_str();
  cmd->add_option("--alpha", o.lora.alpha, "LoRA alpha")->capture_default_str();
  cmd->add_option("--dropout", o.lora.dropout, "LoRA dropout")->capture_default_str();
  cmd->add_option("--targets", args->targets, "Comma-separated modules")->capture_default_str();
  cmd->add_option("--eval-fraction", o.eval_fraction, "Share held out")->capture_default_str();
  cmd->add_option("--eval-every", o.eval_every, "Steps between held-out evaluations")->capture_default_str();
  cmd->add_flag("--chat", o.chat, "Wrap prompts as a user turn in the model's chat format");
  cmd->add_option("--system", args->system, "System prompt for --chat");
  cmd->add_option("--seed", o.seed, "Seed of the split, the order and the adapter's init")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto, f32, bf16, f16")->capture_default_str();
  return [cmd, args]() -> int { return cmd->parsed() ? sft(*args) : -1; };
}

}  // namespace crucible::cli
