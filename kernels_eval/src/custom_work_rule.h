#pragma once
// Whether a candidate that may keep PyTorch's operators (KernelBench's format) did work of its own, from what the
// profiler saw of its correctness calls.
namespace crucible::eval {

// A kernel that writes a task's outputs once runs at least this long on any GPU of today: bytes over twice an H200's
// memory bandwidth (4.8 TB/s).
constexpr double kOwnWriteBytesPerSecond = 1e13;

inline double output_write_us(double output_bytes) { return output_bytes / kOwnWriteBytesPerSecond * 1e6; }

// Under this share the own kernels did no real work whatever their time: a decoy on a scrap beside PyTorch's was
// 0.03% on an H200, the least honest fused epilogue after a kept GEMM 0.56%.
constexpr double kLeastOwnShare = 0.0025;

// No custom work: its own kernels' share of the GPU time is under kLeastOwnShare, or under `floor_share` while they
// also ran shorter than writing the outputs once takes. A fused epilogue after cuBLAS's GEMM is about 1% of the time
// but writes the whole output. A floor of 0 checks nothing. A decoy that burns time can pass any rule of time; these
// make it pay for it.
inline bool no_custom_work(double share, double floor_share, double own_us, double output_bytes) {
  if (floor_share <= 0.0) return false;
  return share < kLeastOwnShare || (share < floor_share && own_us < output_write_us(output_bytes));
}

}  // namespace crucible::eval
