#pragma once
// Built-in LibTorch references, by name. Trusted code: it runs only in the evaluator's process.
#include <torch/torch.h>

#include "crucible/eval/task_spec.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace crucible::eval {

using Params = std::map<std::string, double>;
using ReferenceFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>& inputs, const Params& params)>;

// An empty function when no built-in reference has that name.
ReferenceFn find_reference(const std::string& name);
std::vector<std::string> reference_names();

// A TorchScript program (an imported task's reference) as a reference: its forward takes the task's inputs in
// order and returns one tensor or a tuple of them. Loaded once per file and device; throws TaskError-like
// std::runtime_error when the file cannot be loaded.
ReferenceFn torchscript_reference(const std::string& path, torch::Device device);


// The task's reference for one of its size sets: a built-in by name, or its TorchScript program traced at those
// sizes. Throws TaskError when the task names none that can run.
ReferenceFn reference_for(const TaskSpec& task, const std::string& size_set, torch::Device device);

}  // namespace crucible::eval
