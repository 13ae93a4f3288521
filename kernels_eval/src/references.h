#pragma once
// Built-in LibTorch references, by name. Trusted code: it runs only in the evaluator's process.
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace crucible::eval {

using Params = std::map<std::string, double>;
using ReferenceFn = std::vector<torch::Tensor> (*)(const std::vector<torch::Tensor>& inputs, const Params& params);

// nullptr when no reference has that name.
ReferenceFn find_reference(const std::string& name);
std::vector<std::string> reference_names();

}  // namespace crucible::eval
