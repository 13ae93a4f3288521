# Naive Triton candidate for softmax over the last dimension: one program per row, three passes over the row in
# blocks (maximum, sum of exponentials, output), so rows of any length fit.
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * cols
    y_row = y_ptr + row * cols
    offsets = tl.arange(0, BLOCK)
    row_max = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, cols, BLOCK):
        x = tl.load(x_row + start + offsets, mask=start + offsets < cols, other=float("-inf"))
        row_max = tl.maximum(row_max, x)
    m = tl.max(row_max, axis=0)
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        x = tl.load(x_row + start + offsets, mask=start + offsets < cols, other=float("-inf"))
        total += tl.exp(x - m)
    s = tl.sum(total, axis=0)
    for start in range(0, cols, BLOCK):
        mask = start + offsets < cols
        x = tl.load(x_row + start + offsets, mask=mask, other=float("-inf"))
        tl.store(y_row + start + offsets, tl.exp(x - m) / s, mask=mask)


def crucible_forward(inputs, outputs):
    x, y = inputs[0], outputs[0]
    rows, cols = x.shape
    softmax_kernel[(rows,)](x, y, cols, BLOCK=1024)
