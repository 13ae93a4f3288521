#include "crucible/eval/reference_check.h"

#include <algorithm>
#include <chrono>

#if __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)  // a LibTorch built with CUDA (not Debian's)
#include <c10/cuda/CUDACachingAllocator.h>
#define CRUCIBLE_TORCH_CUDA 1
#endif

#include "crucible/eval/evaluator.h"
#include "crucible/eval/utf8_text.h"
#include "cuda/cuda_device.h"
#include "references.h"
#include "tensor_checks.h"

namespace crucible::eval {
namespace {
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// What the evaluator holds for a task before any candidate: a pool of twice each input plus a mask byte per
// element, one set of inputs, and the reference's outputs.
double bytes_needed(const TaskSpec& task, const Sizes& sizes) {
  double total = 0;
  for (const auto& t : task.inputs) {
    const int64_t n = numel(resolve_shape(t, sizes));
    total += static_cast<double>(pool_bytes(n, t.dtype)) + static_cast<double>(n) * static_cast<double>(dtype_size(t.dtype));
  }
  for (const auto& t : task.outputs)
    total += static_cast<double>(numel(resolve_shape(t, sizes))) * static_cast<double>(dtype_size(t.dtype));
  return total;
}

void sync(const Device& device) {
  if (device.is_cuda()) cuda::synchronize();
}

// LibTorch keeps freed GPU blocks cached: give them back, so the next task's check sees the device's memory as a
// fresh evaluator would.
void release_cached_memory(const Device& device) {
#ifdef CRUCIBLE_TORCH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)device;
#endif
}

ReferenceCheck check_reference_once(const TaskSpec& task, const Device& device) {
  ReferenceCheck check;
  const std::string size_set(backend_name(device.backend));
  auto sizes = task.sizes.find(size_set);
  if (sizes == task.sizes.end()) {
    check.detail = "the task has no '" + size_set + "' sizes";
    return check;
  }
  check.bytes_needed = bytes_needed(task, sizes->second);
  const torch::Device torch_device = device.is_cuda() ? torch::Device(torch::kCUDA, device.index) : torch::kCPU;
  try {
    if (device.is_cuda()) {
      cuda::use_device(device.index);
      check.bytes_free = static_cast<double>(cuda::device_info(device.index).free_bytes);
      if (check.bytes_needed > check.bytes_free) {
        check.status = ReferenceStatus::too_large;
        check.detail = "needs " + std::to_string(static_cast<long long>(check.bytes_needed / (1 << 20))) +
                       " MiB at its '" + size_set + "' sizes; " +
                       std::to_string(static_cast<long long>(check.bytes_free / (1 << 20))) + " MiB free";
        return check;
      }
    }
    auto start = Clock::now();
    ReferenceFn reference = reference_for(task, size_set, torch_device);
    InputPool pool(task, sizes->second, /*seed=*/1, torch_device);
    auto inputs = pool.draw(0);
    sync(device);
    check.load_ms = ms_since(start);
    std::vector<double> runs;
    for (int i = 0; i < 4; ++i) {
      start = Clock::now();
      auto outputs = reference(inputs, task.params);
      sync(device);
      if (i > 0) runs.push_back(ms_since(start));
      if (outputs.size() != task.outputs.size()) {
        check.detail = "returns " + std::to_string(outputs.size()) + " outputs; the task declares " +
                       std::to_string(task.outputs.size());
        return check;
      }
      for (std::size_t k = 0; k < outputs.size(); ++k)
        if (outputs[k].sizes().vec() != resolve_shape(task.outputs[k], sizes->second) ||
            outputs[k].scalar_type() != to_torch(task.outputs[k].dtype)) {
          check.detail = "output " + task.outputs[k].name + " is " + tensor_text(outputs[k]) + ", but " +
                         task.source_path + " declares " + shape_text(resolve_shape(task.outputs[k], sizes->second)) +
                         " " + std::string(dtype_name(task.outputs[k].dtype));
          return check;
        }
    }
    std::sort(runs.begin(), runs.end());
    check.run_ms = runs[runs.size() / 2];
    check.status = ReferenceStatus::ok;
  } catch (const std::exception& e) {  // TaskError, a TorchScript error, CUDA out of memory
    check.status = ReferenceStatus::failed;
    check.detail = valid_utf8(e.what());
  }
  return check;
}

}  // namespace

std::string_view reference_status_name(ReferenceStatus s) {
  switch (s) {
    case ReferenceStatus::ok: return "ok";
    case ReferenceStatus::too_large: return "too_large";
    case ReferenceStatus::failed: return "failed";
  }
  return "failed";
}

ReferenceCheck check_reference(const TaskSpec& task, const Device& device) {
  ReferenceCheck check = check_reference_once(task, device);
  try {
    release_cached_memory(device);
  } catch (const std::exception& e) {  // a fault the reference left behind surfaces here (CUDA errors are sticky)
    check.status = ReferenceStatus::failed;
    check.detail = valid_utf8(e.what()).substr(0, 300);
  }
  return check;
}

}  // namespace crucible::eval
