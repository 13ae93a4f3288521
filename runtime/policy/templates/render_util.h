#pragma once
// Small helpers shared by the renderers.
#include <cstdio>
#include <string>
#include <vector>

#include "crucible/eval/task_spec.h"

namespace crucible::policy::templates {

inline std::string num(int v) { return std::to_string(v); }

// A float literal that round-trips (e.g. an eps), with the 'f' suffix.
inline std::string float_literal(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9ef", v);
  return buf;
}

// A task parameter, or `fallback` when the task does not set it.
inline double param(const eval::TaskSpec& task, const std::string& name, double fallback) {
  auto it = task.params.find(name);
  return it == task.params.end() ? fallback : it->second;
}

// "// search policy: <family>, knob value, knob value" for the first line of a rendered source.
inline std::string banner(const std::string& family, const std::vector<std::string>& names,
                          const std::vector<int>& values) {
  std::string s = "// search policy: " + family;
  for (std::size_t i = 0; i < names.size() && i < values.size(); ++i)
    s += (i ? ", " : ": ") + names[i] + " " + num(values[i]);
  return s + "\n";
}

// CUDA sources: the includes, and Pack<V> (float, float2, float4) with its element access, for vectorised loads;
// opens an anonymous namespace.
inline std::string cuda_prelude() {
  return "#include <crucible/kernel.h>\n#include <cuda_runtime.h>\n#include <math.h>\n#include <stdint.h>\n\n"
         "namespace {\n\n"
         "template <int V> struct Pack;\n"
         "template <> struct Pack<1> { typedef float type; };\n"
         "template <> struct Pack<2> { typedef float2 type; };\n"
         "template <> struct Pack<4> { typedef float4 type; };\n"
         "// Component c of a pack.\n"
         "template <class P>\n"
         "__device__ __forceinline__ float& at(P& p, int c) {\n"
         "  if constexpr (sizeof(P) == sizeof(float)) return p;\n"
         "  else if constexpr (sizeof(P) == 2 * sizeof(float)) return c == 0 ? p.x : p.y;\n"
         "  else return c == 0 ? p.x : (c == 1 ? p.y : (c == 2 ? p.z : p.w));\n"
         "}\n\n";
}

// A host helper for sources that pick a vector width at run time.
inline std::string cuda_aligned_helper() {
  return "// Whether every pointer is aligned for packs of V floats.\n"
         "inline bool aligned(int v, const void* a, const void* b, const void* c = nullptr) {\n"
         "  const uintptr_t mask = static_cast<uintptr_t>(v) * sizeof(float) - 1;\n"
         "  return ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |\n"
         "           reinterpret_cast<uintptr_t>(c)) & mask) == 0;\n"
         "}\n\n";
}

}  // namespace crucible::policy::templates
