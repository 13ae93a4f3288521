// The one part of a lean KernelBench extension that needs PyTorch's Python bindings: a torch.Tensor to and from
// at::Tensor. Compiled once per PyTorch installation (its header pulls in pybind11) and linked into each extension,
// so that an extension's own unit includes only Python.h and ATen. C linkage keeps the interface independent of how
// this PyTorch declares THPVariable_Wrap; hidden visibility keeps it out of the extension's exports.
#include <torch/csrc/autograd/python_variable.h>

extern "C" {
__attribute__((visibility("hidden"))) int crucible_tensor_check(PyObject* object) {
  return THPVariable_Check(object) ? 1 : 0;
}

__attribute__((visibility("hidden"))) const void* crucible_tensor_unpack(PyObject* object) {
  return &THPVariable_Unpack(object);
}

__attribute__((visibility("hidden"))) PyObject* crucible_tensor_wrap(const void* tensor) {
  return THPVariable_Wrap(*static_cast<const at::Tensor*>(tensor));
}
}
