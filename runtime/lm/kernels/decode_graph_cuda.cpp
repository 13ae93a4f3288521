#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "lm/kernels/decode_graph.h"

namespace crucible::lm {

struct DecodeGraph::Impl {
  at::cuda::CUDAGraph graph;
  at::Tensor logits;
};

bool DecodeGraph::available() { return true; }

DecodeGraph::DecodeGraph(const Transformer& model, DecodeBuffers& buffers, int64_t visible, const DecodeGraph* pool_of)
    : impl_(std::make_unique<Impl>()) {
  const auto device = buffers.token.device();
  c10::cuda::CUDAGuard device_guard(device);
  c10::cuda::getCurrentCUDAStream().synchronize();
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  {
    c10::cuda::CUDAStreamGuard stream_guard(side);
    // Warm-up on the capture stream first: cuBLAS handles and workspaces must exist before capture.
    for (int i = 0; i < 2; ++i) decode_step(model, buffers, visible);
    side.synchronize();
    using Pool = decltype(impl_->graph.pool());
    const Pool pool = pool_of ? pool_of->impl_->graph.pool() : Pool{0, 0};
    impl_->graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    impl_->logits = decode_step(model, buffers, visible);
    impl_->graph.capture_end();
  }
  side.synchronize();
}

DecodeGraph::~DecodeGraph() = default;

const at::Tensor& DecodeGraph::replay() {
  impl_->graph.replay();
  return impl_->logits;
}

struct StepCopy::Impl {
  at::Tensor host;
  at::cuda::CUDAEvent copied;
  bool pending = false;
};

StepCopy::StepCopy() : impl_(std::make_unique<Impl>()) {}
StepCopy::~StepCopy() = default;

void StepCopy::start(const at::Tensor& values) {
  auto& i = *impl_;
  if (!values.is_cuda()) {
    i.host = values.to(at::kCPU).contiguous();
    i.pending = false;
    return;
  }
  if (!i.host.defined() || i.host.sizes() != values.sizes() || i.host.scalar_type() != values.scalar_type())
    i.host = at::empty(values.sizes(), values.options().device(at::kCPU).pinned_memory(true));
  const c10::cuda::CUDAGuard on_its_device(values.device());
  i.host.copy_(values, /*non_blocking=*/true);
  i.copied.record(c10::cuda::getCurrentCUDAStream(values.get_device()));
  i.pending = true;
}

const at::Tensor& StepCopy::wait() {
  auto& i = *impl_;
  if (i.pending) i.copied.synchronize();
  i.pending = false;
  return i.host;
}

}  // namespace crucible::lm
