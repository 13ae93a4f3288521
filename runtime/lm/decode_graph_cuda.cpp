#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "lm/decode_graph.h"

namespace crucible::lm {

struct DecodeGraph::Impl {
  at::cuda::CUDAGraph graph;
  at::Tensor logits;
};

bool DecodeGraph::available() { return true; }

DecodeGraph::DecodeGraph(const Transformer& model, DecodeBuffers& buffers) : impl_(std::make_unique<Impl>()) {
  const auto device = buffers.token.device();
  c10::cuda::CUDAGuard device_guard(device);
  c10::cuda::getCurrentCUDAStream().synchronize();
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  {
    c10::cuda::CUDAStreamGuard stream_guard(side);
    // Warm-up on the capture stream first: cuBLAS handles and workspaces must exist before capture.
    for (int i = 0; i < 2; ++i) decode_step(model, buffers, buffers.cache.capacity);
    side.synchronize();
    impl_->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    impl_->logits = decode_step(model, buffers, buffers.cache.capacity);
    impl_->graph.capture_end();
  }
  side.synchronize();
}

DecodeGraph::~DecodeGraph() = default;

const at::Tensor& DecodeGraph::replay() {
  impl_->graph.replay();
  return impl_->logits;
}

}  // namespace crucible::lm
