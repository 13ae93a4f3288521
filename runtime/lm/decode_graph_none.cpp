#include <stdexcept>

#include "lm/decode_graph.h"

namespace crucible::lm {

struct DecodeGraph::Impl {};

bool DecodeGraph::available() { return false; }

DecodeGraph::DecodeGraph(const Transformer&, DecodeBuffers&, int64_t, const DecodeGraph*) {
  throw std::runtime_error("CUDA graphs need a CUDA build of LibTorch");
}

DecodeGraph::~DecodeGraph() = default;

const at::Tensor& DecodeGraph::replay() { throw std::runtime_error("CUDA graphs need a CUDA build of LibTorch"); }

}  // namespace crucible::lm
