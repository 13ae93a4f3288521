#pragma once
// Causal attention with gpt-oss's learned sinks and sliding windows through LibTorch's flash attention kernel, for
// many query rows over whole right-padded sequences (training, log-prob passes, prefills). The kernel skips the
// tiles a query never sees (past its position, before its window) and keeps grouped key heads as they are; the
// general path (plain_attention.h) makes every score of the square through a mask and repeats the key heads.
//
// The kernel gives each query row its plain softmax attention o and the log of its sum of exponentials, lse. A sink
// logit s is one more term of that sum with no value, so the row's output is o * f with f = sigmoid(lse - s). In the
// backward the kernel's own pass takes the gradient of o, f * G (G: the output's), and the output o * f in place of
// o: the kernel's per-row term dO . o then becomes f^2 (G . o), which is (G . o) f minus the gradient that reaches
// lse through f, f (1 - f) (G . o), so the scores' gradients include the sink's share. The sink's own gradient is
// -(1 - f) (G . o f) summed over the rows.
#include <ATen/core/Tensor.h>
#include <torch/version.h>

#include <cstdint>

// LibTorch 2.5 and later: the flash kernel's entry points take a window.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define CRUCIBLE_FLASH_WINDOWS 1
#else
#define CRUCIBLE_FLASH_WINDOWS 0
#endif

namespace crucible::lm {

// Whether flash_sink_attention takes these queries [B, T, H, D] and keys [B, T, Hkv, D]: a LibTorch with the
// kernel's windows, a GPU of compute capability 8.0 or later, bfloat16 or float16, D a multiple of 8 up to 256,
// H a multiple of Hkv, and not switched off (set_flash_sink_attention; CRUCIBLE_FLASH_SINKS=0 starts off; a kernel
// that refuses its first call, as a build without windows does, switches it off for the process).
bool flash_sink_attention_serves(const at::Tensor& queries, const at::Tensor& keys);
void set_flash_sink_attention(bool on);

// The sink's algebra around a kernel that gives each row's o and lse, in float32 (double for double inputs):
// f = sigmoid(lse - sink) [B, T, H, 1] from lse [B, H, >= T] and sinks [H], and the output o f [B, T, H, D] in o's
// dtype; what the kernel's backward takes in place of the output's gradient G, f G in G's dtype; the sinks' gradient
// -(1 - f) (G . o f) summed over batch and rows, [H] in `dtype`. The CPU tests run them around a double-precision
// emulation of the kernel's forward and backward.
struct SinkedRows {
  at::Tensor out, factor;
};
SinkedRows sinked_rows(const at::Tensor& o, const at::Tensor& lse, const at::Tensor& sinks);
at::Tensor kernel_output_gradient(const at::Tensor& grad, const at::Tensor& factor);
at::Tensor sink_gradient(const at::Tensor& grad, const at::Tensor& out, const at::Tensor& factor,
                         c10::ScalarType dtype);

// queries [B, T, H, D], keys and values [B, T, Hkv, D] of whole sequences from position 0 (right padding: rows past
// a sequence's end differ from the masked path's, and nothing reads them), sinks [H] or undefined, window 0 (none)
// or how many positions a query sees, itself included -> [B, T, H * D] in the queries' dtype. Differentiable in
// queries, keys, values and sinks. Nothing (an undefined tensor) where the kernel refused the call.
at::Tensor flash_sink_attention(const at::Tensor& queries, const at::Tensor& keys, const at::Tensor& values,
                                const at::Tensor& sinks, double scale, int64_t window);

}  // namespace crucible::lm
