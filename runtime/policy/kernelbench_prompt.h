#pragma once
// KernelBench's own prompt, built from the user's KernelBench checkout (its prompts.toml and one-shot example pair
// per backend) around a problem's source, so that a model trained on KernelBench sees what it was trained on. The
// project ships no copy: every word comes from the checkout named.
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

namespace crucible::policy {

struct KernelBenchPromptOptions {
  // A KernelBench checkout (its root, holding src/kernelbench/prompts/prompts.toml) or a folder holding prompts.toml
  // and the example files beside it.
  std::filesystem::path kernelbench_dir;
  std::string backend = "cuda";      // a [backends.*] table of prompts.toml: cuda, triton, ...
  std::string option = "one_shot";   // an [options.*] table: zero_shot, one_shot (KernelBench's baseline), few_shot
  std::string precision = "fp32";    // a [precision.*] table
};

// Thrown for a checkout that is missing, or whose prompts.toml lacks what the prompt needs; the message names it.
class KernelBenchPromptError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The prompt for the problem whose source (the whole problem file: Model, get_inputs, get_init_inputs) is given.
std::string kernelbench_prompt(const std::string& problem_source, const KernelBenchPromptOptions& options);

// Where prompts.toml is in a checkout; throws KernelBenchPromptError when it is not there.
std::filesystem::path kernelbench_prompts_toml(const std::filesystem::path& kernelbench_dir);

// Python's str.format over named fields, as KernelBench fills its templates: {name} replaced, {{ and }} as braces.
// Throws KernelBenchPromptError naming a field that `fields` lacks.
std::string format_named(const std::string& text, const std::map<std::string, std::string>& fields);

}  // namespace crucible::policy
