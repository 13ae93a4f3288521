#include "torchscript_float32.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <functional>

namespace crucible::eval {
namespace {

using torch::jit::Block;
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

void each_node(Block* block, const std::function<void(Node*)>& visit) {
  for (Node* node : block->nodes()) {
    visit(node);
    for (Block* inner : node->blocks()) each_node(inner, visit);
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

int convolutions_in_true_float32(torch::jit::Module& module) {
  int switched = 0;
  each_method_node(module, [&](torch::jit::Graph& graph, Node* node) {
    if (!convolution_allowing_tf32(node)) return;
    torch::jit::WithInsertPoint here(node);
    node->replaceInput(kAllowTf32, graph.insertConstant(false));
    ++switched;
  });
  return switched;
}

int convolutions_allowing_tf32(const torch::jit::Module& module) {
  int count = 0;
  each_method_node(module, [&](torch::jit::Graph&, Node* node) { count += convolution_allowing_tf32(node); });
  return count;
}

Tf32Convolutions tf32_convolutions_in(const std::string& path) {
  auto module = torch::jit::load(path);
  Tf32Convolutions found;
  found.stored = convolutions_allowing_tf32(module);
  convolutions_in_true_float32(module);
  found.as_loaded = convolutions_allowing_tf32(module);
  return found;
}

}  // namespace crucible::eval
