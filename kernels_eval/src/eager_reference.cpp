#include "eager_reference.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <algorithm>
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

// A value computed on the device: a tensor that is not a constant of the program.
bool computed_tensor(const torch::jit::Value* v) {
  return v->type()->kind() == c10::TypeKind::TensorType && v->node()->kind() != c10::prim::Constant;
}

// Whether an operator takes a host 0-dim tensor at this use as eager PyTorch takes a number there, with its result
// staying on the device: a binary elementwise operator (TensorIterator's binary ops take host scalars beside device
// tensors), the constant one operand and a computed tensor the other (in place: the constant the second operand),
// or masked_fill's fill value. Not where, lerp or a two-sided clamp, which copy or refuse a host operand.
bool takes_host_scalar(const torch::jit::Use& use) {
  static const std::set<std::string> binary{"add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide",
                                            "remainder", "fmod", "pow", "maximum", "minimum", "clamp_min",
                                            "clamp_max", "lt", "le", "gt", "ge", "eq", "ne"};
  const Node* user = use.user;
  if (!user->kind().is_aten()) return false;
  std::string name = user->kind().toUnqualString();
  const bool in_place = !name.empty() && name.back() == '_';
  if (in_place) name.pop_back();
  if (name == "masked_fill") return use.offset == 2 && computed_tensor(user->input(0));
  if (!binary.count(name) || user->inputs().size() < 2 || use.offset > 1 || (in_place && use.offset != 1))
    return false;
  return computed_tensor(user->input(1 - use.offset));
}

// A 0-dim tensor constant that every use takes as a number (takes_host_scalar), wherever it is.
bool number_constant(const Node* node) {
  if (node->kind() != c10::prim::Constant || node->outputs().size() != 1) return false;
  const auto value = torch::jit::toIValue(node->output());
  if (!value || !value->isTensor()) return false;
  const auto& t = value->toTensor();
  if (!t.defined() || t.dim() != 0) return false;
  const auto& uses = node->output()->uses();
  return !uses.empty() && std::all_of(uses.begin(), uses.end(), takes_host_scalar);
}

// Such a constant off the host.
bool device_scalar(const Node* node) {
  return number_constant(node) && !torch::jit::toIValue(node->output())->toTensor().device().is_cpu();
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
  each_method_node(module, [&](Graph&, Node* node) { check.number_constants += number_constant(node); });
  check.first = run_as_eager(module);
  check.second = run_as_eager(module);
  return check;
}

}  // namespace crucible::eval
