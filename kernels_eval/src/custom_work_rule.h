#pragma once
// Whether a candidate that may keep PyTorch's operators (KernelBench's format) did work of its own, from what the
// profiler saw of its correctness calls.
namespace crucible::eval {

// A kernel that writes a task's outputs once runs at least this long on any GPU of today: bytes over twice an H200's
// memory bandwidth (4.8 TB/s).
constexpr double kOwnWriteBytesPerSecond = 1e13;

inline double output_write_us(double output_bytes) { return output_bytes / kOwnWriteBytesPerSecond * 1e6; }

// No custom work: its own kernels' share of the GPU time is under `floor_share` and they also ran shorter than writing
// the outputs once takes. A fused epilogue after cuBLAS's GEMM is about 1% of the time but writes the whole output; a
// decoy kernel on a scrap beside PyTorch's is about 0.03% and writes next to nothing. A floor of 0 checks nothing.
inline bool no_custom_work(double share, double floor_share, double own_us, double output_bytes) {
  return share < floor_share && own_us < output_write_us(output_bytes);
}

}  // namespace crucible::eval
