#include "policy/kernel_templates.h"

#include <algorithm>

#include "policy/templates/families.h"

namespace crucible::policy {
namespace {

const std::vector<const KernelTemplate*>& family_list(const std::string& backend) {
  static const std::vector<const KernelTemplate*> none;
  static const auto cpu = [] {
    std::vector<const KernelTemplate*> all;
    for (auto family : {templates::elementwise_cpu, templates::row_reduction_cpu, templates::matmul_cpu})
      for (const KernelTemplate* t : family()) all.push_back(t);
    return all;
  }();
  static const auto cuda = [] {
    std::vector<const KernelTemplate*> all;
    for (auto family : {templates::elementwise_cuda, templates::row_reduction_cuda, templates::matmul_cuda})
      for (const KernelTemplate* t : family()) all.push_back(t);
    return all;
  }();
  static const auto triton = [] {
    std::vector<const KernelTemplate*> all;
    for (auto family : {templates::elementwise_triton, templates::row_reduction_triton})
      for (const KernelTemplate* t : family()) all.push_back(t);
    return all;
  }();
  if (backend == "cpu") return cpu;
  if (backend == "cuda") return cuda;
  if (backend == "triton") return triton;
  return none;
}

}  // namespace

const KernelTemplate* template_for(const eval::TaskSpec& task, const std::string& backend) {
  for (const KernelTemplate* t : family_list(backend))
    if (t->name == task.reference) return t;
  return nullptr;
}

std::vector<std::string> covered_tasks(const std::string& backend) {
  std::vector<std::string> names;
  for (const KernelTemplate* t : family_list(backend)) names.push_back(t->name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace crucible::policy
