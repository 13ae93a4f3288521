/* The host part of a CUDA candidate built in two halves (docs/cuda.md, "Split compilation").
 *
 * The device code is compiled alone (NVRTC or nvcc -cubin) and embedded in the shared object; the host code is
 * compiled by g++ with this header first. Kernels are declared to g++ as plain functions with the kernels'
 * signatures, so g++ refers to each launched kernel by the kernel's own mangled name; the linker then binds that name
 * to an entry of `crucible_fast_kernels` (written by the compiler from the device code's symbol table), and the
 * launch goes through that entry. Nothing here is part of the candidate contract: candidates keep writing <<<>>>.
 */
#ifndef CRUCIBLE_FAST_LAUNCH_H
#define CRUCIBLE_FAST_LAUNCH_H

#include <crucible/kernel.h>
#include <cuda_runtime.h>

#include <utility>

/* Kernel qualifiers cuda_runtime.h leaves undefined outside nvcc: the host half never sees a kernel's body. */
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#ifndef __maxnreg__
#define __maxnreg__(...)
#endif
#ifndef __cluster_dims__
#define __cluster_dims__(...)
#endif
#ifndef __grid_constant__
#define __grid_constant__
#endif

namespace crucible_fast {

struct Kernel {
  const char* name;     /* the device code's mangled name */
  cudaKernel_t handle;  /* resolved when the library is loaded */
};

}  // namespace crucible_fast

extern "C" {
__attribute__((visibility("hidden"))) extern const unsigned char crucible_fast_cubin[];
__attribute__((visibility("hidden"))) extern crucible_fast::Kernel crucible_fast_kernels[];
__attribute__((visibility("hidden"))) extern const unsigned crucible_fast_kernel_count;
}

namespace crucible_fast {

/* Every kernel is resolved while the library loads (before the worker's run-stage filter), never during a call. */
__attribute__((constructor)) static void load_device_code() {
  cudaLibrary_t library = nullptr;
  if (cudaLibraryLoadData(&library, crucible_fast_cubin, nullptr, nullptr, 0, nullptr, nullptr, 0) != cudaSuccess)
    return;  /* every launch then fails with an invalid-function error, which the candidate reports */
  for (unsigned i = 0; i < crucible_fast_kernel_count; ++i)
    if (cudaLibraryGetKernel(&crucible_fast_kernels[i].handle, library, crucible_fast_kernels[i].name) != cudaSuccess)
      crucible_fast_kernels[i].handle = nullptr;
}

/* A kernel's address in host code is its entry; anything else passes through unchanged. */
inline const void* device_function(const void* f) {
  const Kernel* k = static_cast<const Kernel*>(f);
  if (k >= crucible_fast_kernels && k < crucible_fast_kernels + crucible_fast_kernel_count)
    return reinterpret_cast<const void*>(k->handle);
  return f;
}
template <class R, class... P>
const void* device_function(R (*f)(P...)) {
  return device_function(reinterpret_cast<const void*>(f));
}

/* `k<<<grid, block, smem, stream>>>(args)` becomes `launch(k, grid, block, smem, stream)(args)`: the arguments are
 * converted to the kernel's parameter types as in a call, as nvcc does for <<<>>>. */
template <class... P>
struct Launch {
  const void* kernel;
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;

  template <class... A>
  cudaError_t operator()(A&&... args) const {
    return with(std::forward<A>(args)...);
  }

 private:
  cudaError_t with(P... values) const {
    void* pointers[sizeof...(P) + 1] = {static_cast<void*>(&values)..., nullptr};
    return ::cudaLaunchKernel(kernel, grid, block, pointers, shared_bytes, stream);
  }
};

template <class... P>
Launch<P...> launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes = 0, cudaStream_t stream = 0) {
  return Launch<P...>{device_function(kernel), grid, block, shared_bytes, stream};
}

/* The runtime calls that take a kernel's address, given the kernel's handle instead. */
template <class F>
cudaError_t func_set_attribute(F f, cudaFuncAttribute attribute, int value) {
  return ::cudaFuncSetAttribute(device_function(f), attribute, value);
}
template <class F>
cudaError_t func_get_attributes(cudaFuncAttributes* attributes, F f) {
  return ::cudaFuncGetAttributes(attributes, device_function(f));
}
template <class F>
cudaError_t occupancy_max_active_blocks(int* blocks, F f, int block_size, size_t shared_bytes) {
  return ::cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, device_function(f), block_size, shared_bytes);
}
template <class F>
cudaError_t launch_kernel(F f, dim3 grid, dim3 block, void** args, size_t shared_bytes, cudaStream_t stream) {
  return ::cudaLaunchKernel(device_function(f), grid, block, args, shared_bytes, stream);
}

}  // namespace crucible_fast

#define cudaFuncSetAttribute ::crucible_fast::func_set_attribute
#define cudaFuncGetAttributes ::crucible_fast::func_get_attributes
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor ::crucible_fast::occupancy_max_active_blocks
#define cudaLaunchKernel ::crucible_fast::launch_kernel

#endif /* CRUCIBLE_FAST_LAUNCH_H */
