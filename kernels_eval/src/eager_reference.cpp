#include "eager_reference.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

namespace crucible::eval {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;

// aten::_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, benchmark,
// deterministic, cudnn_enabled, allow_tf32)
constexpr size_t kConvolutionArguments = 13;
constexpr size_t kAllowTf32 = 12;

bool convolution_allowing_tf32(const Node* node) {
  if (node->kind() != c10::Symbol::fromQualString("aten::_convolution") ||
      node->inputs().size() != kConvolutionArguments)
    return false;
  const auto allow = torch::jit::toIValue(node->input(kAllowTf32));
  return !allow || !allow->isBool() || allow->toBool();  // not a constant: it could be on
}

// Operators that take a host 0-dim tensor beside device tensors as a scalar (in place too: add_, mul_...).
bool elementwise_operator(const Node* node) {
  static const std::set<std::string> names{
      "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow", "atan2",
      "maximum", "minimum", "fmax", "fmin", "clamp", "clamp_min", "clamp_max", "where", "masked_fill", "lt", "le",
      "gt", "ge", "eq", "ne", "logical_and", "logical_or", "bitwise_and", "bitwise_or", "bitwise_xor", "lerp",
      "hardtanh", "threshold", "copysign", "xlogy", "hypot"};
  const c10::Symbol kind = node->kind();
  if (!kind.is_aten()) return false;
  std::string name = kind.toUnqualString();
  if (!name.empty() && name.back() == '_') name.pop_back();
  return names.count(name) > 0;
}

// A 0-dim tensor constant off the host whose every use is an elementwise operator's operand.
bool device_scalar(const Node* node) {
  if (node->kind() != c10::prim::Constant || node->outputs().size() != 1) return false;
  const auto value = torch::jit::toIValue(node->output());
  if (!value || !value->isTensor()) return false;
  const auto& t = value->toTensor();
  if (!t.defined() || t.dim() != 0 || t.device().is_cpu()) return false;
  for (const auto& use : node->output()->uses())
    if (!elementwise_operator(use.user)) return false;
  return true;
}

void each_node(Block* block, const std::function<void(Node*)>& visit) {
  std::vector<Node*> nodes(block->nodes().begin(), block->nodes().end());  // visit may replace a node
  for (Node* node : nodes) {
    for (Block* inner : node->blocks()) each_node(inner, visit);
    visit(node);
  }
}

template <typename Visit>
void each_method_node(const torch::jit::Module& module, Visit visit) {
  for (const auto& sub : module.modules())
    for (const auto& method : sub.get_methods()) {
      const auto graph = method.graph();
      each_node(graph->block(), [&](Node* node) { visit(*graph, node); });
    }
}

}  // namespace

EagerRewrites run_as_eager(torch::jit::Module& module) {
  EagerRewrites done;
  each_method_node(module, [&](Graph& graph, Node* node) {
    torch::jit::WithInsertPoint here(node);
    if (convolution_allowing_tf32(node)) {
      node->replaceInput(kAllowTf32, graph.insertConstant(false));
      ++done.tf32_convolutions;
    } else if (device_scalar(node)) {
      const auto on_host = torch::jit::toIValue(node->output())->toTensor().cpu();
      torch::jit::Value* scalar = graph.insertConstant(on_host);
      node->output()->replaceAllUsesWith(scalar);
      node->destroy();
      ++done.device_scalars;
    }
  });
  return done;
}

EagerRewriteCheck eager_rewrites_of(const std::string& path, const std::string& device) {
  auto module = torch::jit::load(path, c10::Device(device));
  EagerRewriteCheck check;
  check.first = run_as_eager(module);
  check.second = run_as_eager(module);
  return check;
}

}  // namespace crucible::eval
