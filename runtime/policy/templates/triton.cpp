// Triton templates (relu, gelu; softmax, log_softmax): Python sources that launch one @triton.jit kernel, for the
// "triton" backend. Elementwise: blocks of `block` elements, `warps` warps each. Row reductions: one program per row,
// three passes over the row in blocks of `block` (maximum, sum of exponentials, output), `warps` warps each, so rows
// of any length fit. Every source passes the Triton gate (tests/triton/test_gate.py runs them all).
#include "policy/templates/families.h"
#include "policy/templates/render_util.h"

namespace crucible::policy::templates {
namespace {

std::string header(const std::string& family, const std::vector<std::string>& names, const std::vector<int>& v) {
  std::string b = banner(family, names, v);
  b[0] = '#';  // a Python comment
  b[1] = ' ';
  return b + "import torch\nimport triton\nimport triton.language as tl\n\n\n";
}

const std::vector<std::string> kElementwiseKnobs{"block", "warps"};

std::string elementwise(const std::string& family, const std::string& expression, const std::vector<int>& v) {
  return header(family, kElementwiseKnobs, v) +
         "@triton.jit\n"
         "def elementwise_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
         "    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)\n"
         "    mask = offsets < n\n"
         "    x = tl.load(x_ptr + offsets, mask=mask)\n"
         "    tl.store(y_ptr + offsets, " + expression + ", mask=mask)\n\n\n"
         "def crucible_forward(inputs, outputs):\n"
         "    x, y = inputs[0], outputs[0]\n"
         "    n = x.numel()\n"
         "    elementwise_kernel[(triton.cdiv(n, " + num(v[0]) + "),)](x, y, n, BLOCK=" + num(v[0]) +
         ", num_warps=" + num(v[1]) + ")\n";
}

const KernelTemplate kRelu{"relu", {{"block", {256, 512, 1024, 2048, 4096}}, {"warps", {2, 4, 8}}},
                           [](const eval::TaskSpec&, const std::vector<int>& v) {
                             return elementwise("relu", "tl.where(x > 0.0, x, 0.0)", v);
                           }};
// The exact (erf) GELU, as torch.nn.functional.gelu computes by default.
const KernelTemplate kGelu{"gelu", {{"block", {256, 512, 1024, 2048, 4096}}, {"warps", {2, 4, 8}}},
                           [](const eval::TaskSpec&, const std::vector<int>& v) {
                             return elementwise("gelu", "0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))", v);
                           }};

const std::vector<std::string> kRowKnobs{"block", "warps"};

std::string row_reduction(const std::string& family, bool log, const std::vector<int>& v) {
  const std::string out = log ? "x - m - tl.log(s)" : "tl.exp(x - m) / s";
  return header(family, kRowKnobs, v) +
         "@triton.jit\n"
         "def row_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):\n"
         "    row = tl.program_id(0).to(tl.int64)\n"
         "    x_row = x_ptr + row * cols\n"
         "    y_row = y_ptr + row * cols\n"
         "    offsets = tl.arange(0, BLOCK)\n"
         "    row_max = tl.full([BLOCK], float(\"-inf\"), tl.float32)\n"
         "    for start in range(0, cols, BLOCK):\n"
         "        x = tl.load(x_row + start + offsets, mask=start + offsets < cols, other=float(\"-inf\"))\n"
         "        row_max = tl.maximum(row_max, x)\n"
         "    m = tl.max(row_max, axis=0)\n"
         "    total = tl.zeros([BLOCK], tl.float32)\n"
         "    for start in range(0, cols, BLOCK):\n"
         "        x = tl.load(x_row + start + offsets, mask=start + offsets < cols, other=float(\"-inf\"))\n"
         "        total += tl.exp(x - m)\n"
         "    s = tl.sum(total, axis=0)\n"
         "    for start in range(0, cols, BLOCK):\n"
         "        mask = start + offsets < cols\n"
         "        x = tl.load(x_row + start + offsets, mask=mask, other=0.0)\n"
         "        tl.store(y_row + start + offsets, " + out + ", mask=mask)\n\n\n"
         "def crucible_forward(inputs, outputs):\n"
         "    x, y = inputs[0], outputs[0]\n"
         "    cols = x.shape[-1]\n"
         "    rows = x.numel() // cols\n"
         "    row_kernel[(rows,)](x, y, cols, BLOCK=" + num(v[0]) + ", num_warps=" + num(v[1]) + ")\n";
}

const KernelTemplate kSoftmax{"softmax", {{"block", {512, 1024, 2048, 4096}}, {"warps", {4, 8, 16}}},
                              [](const eval::TaskSpec&, const std::vector<int>& v) {
                                return row_reduction("softmax", false, v);
                              }};
const KernelTemplate kLogSoftmax{"log_softmax", {{"block", {512, 1024, 2048, 4096}}, {"warps", {4, 8, 16}}},
                                 [](const eval::TaskSpec&, const std::vector<int>& v) {
                                   return row_reduction("log_softmax", true, v);
                                 }};

}  // namespace

std::vector<const KernelTemplate*> elementwise_triton() { return {&kRelu, &kGelu}; }
std::vector<const KernelTemplate*> row_reduction_triton() { return {&kSoftmax, &kLogSoftmax}; }

}  // namespace crucible::policy::templates
