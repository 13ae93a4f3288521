#pragma once
// A traced program records a convolution's TF32 switch as a constant argument of the call (aten::_convolution's
// last), taken from the tracing process: PyTorch's default lets cuDNN use TF32, so a reference traced that way
// would compute its convolutions in TF32 whatever the evaluator sets, and miss float32's tolerance against an
// answer that computes in true float32.
#include <string>

namespace torch::jit {
struct Module;
}

namespace crucible::eval {

// Rewrites every traced convolution in the module's methods (its submodules' too) to run with TF32 off; returns
// how many it switched.
int convolutions_in_true_float32(torch::jit::Module& module);

// How many traced convolutions in the module's methods would run with TF32 on.
int convolutions_allowing_tf32(const torch::jit::Module& module);

// A TorchScript file's traced convolutions that would run with TF32 on: as stored, and once switched as a reference
// is when the evaluator loads it.
struct Tf32Convolutions {
  int stored = 0;
  int as_loaded = 0;
};
Tf32Convolutions tf32_convolutions_in(const std::string& path);

}  // namespace crucible::eval
