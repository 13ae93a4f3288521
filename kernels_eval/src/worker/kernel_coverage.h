#pragma once
// Profiling coverage inside a CUDA worker: which share of a call's GPU time went to kernels the candidate itself
// compiled (registered by its own fat binary), against everything else it caused to run (library kernels, copies,
// memsets). A reward can penalise candidates that hand the work to someone else's code.
namespace crucible::eval::worker::coverage {

// Before the worker is sealed: sets up CUPTI's activity buffers (and whatever threads CUPTI keeps).
bool start();
// Around one profiled call: the share in [0, 1], or -1 when nothing ran on the GPU or profiling is unavailable.
void begin_call();
// Kernels the candidate launches that no fat binary registered (a Triton candidate's, by name).
void add_own_kernel(const char* name);
double end_call();
// A reused worker's next candidate: the names the last one registered are no longer its own.
void forget_own_kernels();

}  // namespace crucible::eval::worker::coverage
