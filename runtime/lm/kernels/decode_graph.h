#pragma once
// Decode steps replayed from a CUDA graph: one launch per step instead of a few hundred kernel launches, which is
// what bounds small-batch decoding. Built only against a CUDA LibTorch; elsewhere `available()` is false.
#include <ATen/core/Tensor.h>

#include <memory>

#include "lm/generation/decode_step.h"

namespace crucible::lm {

class DecodeGraph {
 public:
  static bool available();
  // Captures decode_step over cache slots [0, visible). The buffers must outlive the graph and keep their storage.
  // Graphs of one generator share `pool_of`'s memory pool (they never replay at once); nullptr: a pool of its own.
  DecodeGraph(const Transformer& model, DecodeBuffers& buffers, int64_t visible, const DecodeGraph* pool_of = nullptr);
  ~DecodeGraph();
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;

  const at::Tensor& replay();  // logits [B, V], overwritten by the next replay

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A step's sampled values on their way to the host, without waiting for what the stream does after them: start()
// queues the copy (into pinned memory, on a GPU), wait() returns the host copy once it is there. The host copy is
// reused by the next start().
class StepCopy {
 public:
  StepCopy();
  ~StepCopy();
  StepCopy(const StepCopy&) = delete;
  StepCopy& operator=(const StepCopy&) = delete;

  void start(const at::Tensor& values);
  const at::Tensor& wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crucible::lm
