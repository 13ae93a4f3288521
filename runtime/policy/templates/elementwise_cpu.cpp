// CPU elementwise templates (relu, gelu): the flat index space in blocks of `block` elements, each block processed
// `unroll` elements at a time with a scalar tail.
#include "policy/templates/families.h"
#include "policy/templates/render_util.h"

namespace crucible::policy::templates {
namespace {

std::string elementwise(const std::string& family, const std::string& expression, const std::vector<int>& v,
                        const std::vector<std::string>& names) {
  const int block = v[0], unroll = v[1];
  return banner(family, names, v) +
         "#include <crucible/kernel.h>\n#include <cmath>\n"
         "static inline float op(float v) { return " + expression + "; }\n"
         "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {\n"
         "  const float* x = static_cast<const float*>(in[0].data);\n"
         "  float* y = static_cast<float*>(out[0].data);\n"
         "  int64_t n = 1;\n  for (int32_t d = 0; d < in[0].ndim; ++d) n *= in[0].shape[d];\n"
         "  constexpr int64_t kBlock = " + num(block) + ", kUnroll = " + num(unroll) + ";\n"
         "  for (int64_t start = 0; start < n; start += kBlock) {\n"
         "    const int64_t end = start + kBlock < n ? start + kBlock : n;\n"
         "    int64_t i = start;\n"
         "    for (; i + kUnroll <= end; i += kUnroll)\n"
         "#pragma GCC unroll 8\n"
         "      for (int64_t u = 0; u < kUnroll; ++u) y[i + u] = op(x[i + u]);\n"
         "    for (; i < end; ++i) y[i] = op(x[i]);\n"
         "  }\n  return 0;\n}\n";
}

std::string relu(const eval::TaskSpec&, const std::vector<int>& v) {
  return elementwise("relu (cpu)", "v > 0.0f ? v : 0.0f", v, {"block", "unroll"});
}

// precision 0: erf in double (as the naive candidate); 1: erff in float (cheaper, within the task's tolerance).
std::string gelu(const eval::TaskSpec&, const std::vector<int>& v) {
  const std::string expression = v[2] == 0
                                     ? "static_cast<float>(0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440)))"
                                     : "0.5f * v * (1.0f + std::erf(v * 0.707106781f))";
  return elementwise("gelu (cpu)", expression, v, {"block", "unroll", "precision"});
}

const KernelTemplate kRelu{"relu", {{"block", {64, 256, 1024, 4096}}, {"unroll", {1, 2, 4, 8}}}, relu};
const KernelTemplate kGelu{"gelu",
                           {{"block", {64, 256, 1024, 4096}}, {"unroll", {1, 2, 4, 8}}, {"precision", {0, 1}}},
                           gelu};

}  // namespace

std::vector<const KernelTemplate*> elementwise_cpu() { return {&kRelu, &kGelu}; }

}  // namespace crucible::policy::templates
