#include <ATen/ATen.h>

#include <stdexcept>

#include "lm/kernels/decode_graph.h"

namespace crucible::lm {

struct DecodeGraph::Impl {};

bool DecodeGraph::available() { return false; }

DecodeGraph::DecodeGraph(const Transformer&, DecodeBuffers&, int64_t, const DecodeGraph*) {
  throw std::runtime_error("CUDA graphs need a CUDA build of LibTorch");
}

DecodeGraph::~DecodeGraph() = default;

const at::Tensor& DecodeGraph::replay() { throw std::runtime_error("CUDA graphs need a CUDA build of LibTorch"); }

struct StepCopy::Impl {
  at::Tensor host;
};

StepCopy::StepCopy() : impl_(std::make_unique<Impl>()) {}
StepCopy::~StepCopy() = default;

void StepCopy::start(const at::Tensor& values) { impl_->host = values.to(at::kCPU).contiguous(); }

const at::Tensor& StepCopy::wait() { return impl_->host; }

}  // namespace crucible::lm
