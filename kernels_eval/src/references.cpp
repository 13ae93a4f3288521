#include "references.h"
#include "eager_reference.h"

#include "crucible/eval/evaluator.h"

#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <memory>
#include <mutex>

namespace crucible::eval {
namespace {
namespace F = torch::nn::functional;
using Tensors = std::vector<torch::Tensor>;

double param(const Params& p, const char* name, double fallback) {
  auto it = p.find(name);
  return it == p.end() ? fallback : it->second;
}

Tensors relu(const Tensors& in, const Params&) { return {torch::relu(in[0])}; }
Tensors gelu(const Tensors& in, const Params&) { return {torch::gelu(in[0])}; }
Tensors softmax(const Tensors& in, const Params&) { return {torch::softmax(in[0], -1)}; }
Tensors log_softmax(const Tensors& in, const Params&) { return {torch::log_softmax(in[0], -1)}; }
Tensors layernorm(const Tensors& in, const Params& p) {
  return {torch::layer_norm(in[0], {in[0].size(-1)}, in[1], in[2], param(p, "eps", 1e-5))};
}
Tensors rmsnorm(const Tensors& in, const Params& p) {
  auto x = in[0];
  return {x * torch::rsqrt(x.pow(2).mean(-1, true) + param(p, "eps", 1e-6)) * in[1]};
}
Tensors sum_dim(const Tensors& in, const Params&) { return {in[0].sum(-1)}; }
Tensors argmax_dim(const Tensors& in, const Params&) { return {in[0].argmax(-1)}; }
Tensors matmul(const Tensors& in, const Params&) { return {torch::mm(in[0], in[1])}; }
Tensors bmm(const Tensors& in, const Params&) { return {torch::bmm(in[0], in[1])}; }
Tensors matvec(const Tensors& in, const Params&) { return {torch::mv(in[0], in[1])}; }
Tensors conv2d(const Tensors& in, const Params&) {
  return {torch::conv2d(in[0], in[1], {}, /*stride=*/1, /*padding=*/1)};
}
Tensors maxpool2d(const Tensors& in, const Params& p) {
  auto k = static_cast<int64_t>(param(p, "kernel", 2));
  auto s = static_cast<int64_t>(param(p, "stride", static_cast<double>(k)));
  return {torch::max_pool2d(in[0], {k, k}, {s, s})};
}
Tensors cumsum(const Tensors& in, const Params&) { return {torch::cumsum(in[0], -1)}; }
Tensors mse_loss(const Tensors& in, const Params&) { return {torch::mse_loss(in[0], in[1])}; }
Tensors cross_entropy(const Tensors& in, const Params&) { return {F::cross_entropy(in[0], in[1])}; }
Tensors row_mean(const Tensors& in, const Params&) { return {in[0].mean(-1)}; }

// GPU MODE's TriMul, the "outgoing" triangle multiplicative update of AlphaFold3, in its reference's order of
// operations. Inputs: x [B, N, N, C], mask [B, N, N], the input norm's weight and bias [C], the left and right
// projections and gates [H, C] (Linear weights: y = x W^T, no bias), the output gate [H, C], the output norm's weight
// and bias [H], and the output projection [C, H].
Tensors trimul(const Tensors& in, const Params&) {
  const int64_t C = in[0].size(-1), H = in[4].size(0);
  auto x = torch::layer_norm(in[0], {C}, in[2], in[3], 1e-5);
  auto mask = in[1].unsqueeze(-1);
  auto left = torch::matmul(x, in[4].t()) * mask * torch::sigmoid(torch::matmul(x, in[6].t()));
  auto right = torch::matmul(x, in[5].t()) * mask * torch::sigmoid(torch::matmul(x, in[7].t()));
  auto out = torch::einsum("bikd,bjkd->bijd", {left, right});
  out = torch::layer_norm(out, {H}, in[9], in[10], 1e-5) * torch::sigmoid(torch::matmul(x, in[8].t()));
  return {torch::matmul(out, in[11].t())};
}

const std::map<std::string, ReferenceFn>& registry() {
  static const std::map<std::string, ReferenceFn> r{
      {"relu", relu},         {"gelu", gelu},         {"softmax", softmax},       {"log_softmax", log_softmax},
      {"layernorm", layernorm}, {"rmsnorm", rmsnorm}, {"sum_dim", sum_dim},       {"argmax_dim", argmax_dim},
      {"matmul", matmul},     {"bmm", bmm},           {"matvec", matvec},         {"conv2d", conv2d},
      {"maxpool2d", maxpool2d}, {"cumsum", cumsum},   {"mse_loss", mse_loss},     {"cross_entropy", cross_entropy},
      {"row_mean", row_mean},   {"trimul", trimul}};
  return r;
}

}  // namespace

ReferenceFn find_reference(const std::string& name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

ReferenceFn torchscript_reference(const std::string& path, torch::Device device) {
  // Loaded once per file and device: a module is not cheap to load, and evaluations of one task repeat.
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::string>, std::shared_ptr<torch::jit::Module>> loaded;
  std::shared_ptr<torch::jit::Module> module;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = loaded[{path, device.str()}];
    if (!slot) {
      try {
        auto fresh = std::make_shared<torch::jit::Module>(torch::jit::load(path, device));
        run_as_eager(*fresh);  // before it is kept: a rewrite that throws leaves nothing half-done in the cache
        slot = fresh;
      } catch (const std::exception& e) {
        throw std::runtime_error("cannot load the TorchScript reference " + path + ": " + e.what());
      }
    }
    module = slot;
  }
  return [module](const Tensors& inputs, const Params&) {
    torch::NoGradGuard no_grad;
    // Eager PyTorch is the reference, as KernelBench times it: TorchScript's executor would otherwise fuse a
    // problem's elementwise chain on a GPU after its profiling runs (Softsign's three kernels ran as one, halving
    // the reference's time against KernelBench's own on an H200).
    torch::jit::GraphOptimizerEnabledGuard eager(false);
    std::vector<torch::jit::IValue> args(inputs.begin(), inputs.end());
    auto out = module->forward(args);
    Tensors outputs;
    if (out.isTensor()) {
      outputs.push_back(out.toTensor());
    } else if (out.isTuple()) {
      for (const auto& e : out.toTuple()->elements()) outputs.push_back(e.toTensor());
    } else if (out.isTensorList()) {
      for (const auto& t : out.toTensorVector()) outputs.push_back(t);
    } else {
      throw std::runtime_error("the TorchScript reference returns neither a tensor nor a tuple of tensors");
    }
    return outputs;
  };
}

std::vector<std::string> reference_names() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : registry()) names.push_back(name);
  return names;
}

// A built-in reference by name, or an imported task's TorchScript program traced at these sizes.
ReferenceFn reference_for(const TaskSpec& task, const std::string& size_set, torch::Device device) {
  if (task.reference != "torchscript") {
    ReferenceFn reference = find_reference(task.reference);
    if (!reference) throw TaskError("task '" + task.name + "': unknown reference '" + task.reference + "'");
    return reference;
  }
  auto file = task.reference_files.find(size_set);
  if (file == task.reference_files.end())
    throw TaskError("task '" + task.name + "': no TorchScript reference for its '" + size_set +
                    "' sizes (import it where those sizes run, e.g. on the GPU node for cuda)");
  try {
    return torchscript_reference(file->second, device);
  } catch (const std::runtime_error& e) {
    throw TaskError("task '" + task.name + "': " + e.what());
  }
}


}  // namespace crucible::eval
