#include "policy/kernel_templates.h"

#include <algorithm>

#include "policy/templates/families.h"

namespace crucible::policy {
namespace {

const std::vector<const KernelTemplate*>& family_list(eval::CandidateLanguage language) {
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
  if (language == eval::CandidateLanguage::cpp()) return cpu;
  if (language == eval::CandidateLanguage::cuda_cpp()) return cuda;
  if (language.kind == eval::CandidateKind::triton) return triton;  // GPU only, whatever backend it is paired with
  return none;
}

}  // namespace

std::vector<eval::CandidateLanguage> template_languages() {
  return {eval::CandidateLanguage::cpp(), eval::CandidateLanguage::cuda_cpp(), eval::CandidateLanguage::triton()};
}

const KernelTemplate* template_for(const eval::TaskSpec& task, eval::CandidateLanguage language) {
  for (const KernelTemplate* t : family_list(language))
    if (t->name == task.reference) return t;
  return nullptr;
}

std::vector<std::string> covered_tasks(eval::CandidateLanguage language) {
  std::vector<std::string> names;
  for (const KernelTemplate* t : family_list(language)) names.push_back(t->name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace crucible::policy
