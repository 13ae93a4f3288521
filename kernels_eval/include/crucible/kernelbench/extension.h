#pragma once
// What a KernelBench answer's `#include <torch/extension.h>` reads in Crucible's lean build: PyTorch's tensor API
// (torch/types.h: ATen, at:: and torch:: operators, factories, TORCH_CHECK, AT_DISPATCH) without torch/all.h's
// modules and optimisers and without torch/python.h and pybind11, which the lean build's bindings do not need
// (crucible_bindings.h). An answer that uses more of PyTorch's C++ API fails this build and is built again with the
// real header.
#include <torch/types.h>
