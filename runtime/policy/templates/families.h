#pragma once
// The template families, one file each (per kind of kernel and backend); kernel_templates.cpp indexes them.
#include <string>
#include <vector>

#include "policy/kernel_templates.h"

namespace crucible::policy::templates {

// Each returns its family's templates; a template's name is the reference it covers.
std::vector<const KernelTemplate*> elementwise_cpu();
std::vector<const KernelTemplate*> row_reduction_cpu();
std::vector<const KernelTemplate*> matmul_cpu();
std::vector<const KernelTemplate*> elementwise_cuda();
std::vector<const KernelTemplate*> row_reduction_cuda();
std::vector<const KernelTemplate*> matmul_cuda();
std::vector<const KernelTemplate*> elementwise_triton();
std::vector<const KernelTemplate*> row_reduction_triton();

}  // namespace crucible::policy::templates
