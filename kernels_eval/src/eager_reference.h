#pragma once
// An imported task's reference is a traced program, which records two things of the tracing process that eager
// PyTorch (KernelBench's reference) decides per call:
// - a convolution's TF32 switch, as a constant argument (aten::_convolution's last), from PyTorch's default (on): the
//   evaluator compares in true float32, and TF32's errors exceed float32's tolerance;
// - a Python number in arithmetic (`1 + x`), as a 0-dim tensor constant, which loading onto a GPU puts in device
//   memory: an operand there makes the elementwise kernel a broadcasting, type-casting one (Softsign's add ran 1.8x
//   slower than eager's, the whole reference 20%), where eager passes the number as a scalar argument. On the host
//   it is that scalar again (a CPU 0-dim tensor is one to a binary elementwise GPU operator), with the same type
//   promotion; only where every use is such an operand beside a computed tensor.
// run_as_eager rewrites both in a loaded module's methods (its submodules' too).
#include <string>

namespace torch::jit {
struct Module;
}

namespace crucible::eval {

struct EagerRewrites {
  int tf32_convolutions = 0;  // convolutions switched to true float32
  int device_scalars = 0;     // 0-dim constants off the host that every use takes as a number, put on the host
};

EagerRewrites run_as_eager(torch::jit::Module& module);

// For tests and tools: a TorchScript file loaded onto `device` ("cpu", "cuda:0"), its constants that would go to the
// host were they on a device, what run_as_eager rewrote in it, and what a second pass still finds (nothing, unless
// the rewrite failed).
struct EagerRewriteCheck {
  int number_constants = 0;  // 0-dim constants, on any device, that every use takes as a number
  EagerRewrites first, second;
};
EagerRewriteCheck eager_rewrites_of(const std::string& path, const std::string& device);

}  // namespace crucible::eval
