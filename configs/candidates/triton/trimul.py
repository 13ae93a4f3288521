# Naive Triton candidate for trimul: four kernels, one per step of the reference, with scratch tensors between them.
#   1. layer norm of x over C;
#   2. the five projections of the normalised x (tl.dot over C in float32), masked and gated, stored so that each
#      (b, h) pair's left and right matrices are contiguous N x N blocks;
#   3. the triangle product, one N x N matrix product per (b, h);
#   4. layer norm over H, the out gate, and the output projection.
import torch
import triton
import triton.language as tl


@triton.jit
def norm_in_kernel(x_ptr, w_ptr, b_ptr, y_ptr, C, BLOCK_C: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_C)
    m = cols < C
    x = tl.load(x_ptr + row * C + cols, mask=m, other=0.0)
    mean = tl.sum(x, axis=0) / C
    d = tl.where(m, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / C + 1e-5)
    w = tl.load(w_ptr + cols, mask=m, other=0.0)
    b = tl.load(b_ptr + cols, mask=m, other=0.0)
    tl.store(y_ptr + row * C + cols, d * rstd * w + b, mask=m)


@triton.jit
def project_kernel(xn_ptr, mask_ptr, lp_ptr, rp_ptr, lg_ptr, rg_ptr, og_ptr, left_ptr, right_ptr, gate_ptr,
                   R, NN, C, H, BM: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
    hs = tl.arange(0, BH)
    rmask = rows < R
    hmask = hs < H
    acc_lp = tl.zeros([BM, BH], tl.float32)
    acc_rp = tl.zeros([BM, BH], tl.float32)
    acc_lg = tl.zeros([BM, BH], tl.float32)
    acc_rg = tl.zeros([BM, BH], tl.float32)
    acc_og = tl.zeros([BM, BH], tl.float32)
    for k0 in range(0, C, BK):
        ks = k0 + tl.arange(0, BK)
        kmask = ks < C
        a = tl.load(xn_ptr + rows[:, None] * C + ks[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0)
        wmask = kmask[:, None] & hmask[None, :]
        w_offsets = hs[None, :] * C + ks[:, None]
        acc_lp += tl.dot(a, tl.load(lp_ptr + w_offsets, mask=wmask, other=0.0), input_precision="ieee")
        acc_rp += tl.dot(a, tl.load(rp_ptr + w_offsets, mask=wmask, other=0.0), input_precision="ieee")
        acc_lg += tl.dot(a, tl.load(lg_ptr + w_offsets, mask=wmask, other=0.0), input_precision="ieee")
        acc_rg += tl.dot(a, tl.load(rg_ptr + w_offsets, mask=wmask, other=0.0), input_precision="ieee")
        acc_og += tl.dot(a, tl.load(og_ptr + w_offsets, mask=wmask, other=0.0), input_precision="ieee")
    m = tl.load(mask_ptr + rows, mask=rmask, other=0.0)
    left = acc_lp * m[:, None] * tl.sigmoid(acc_lg)
    right = acc_rp * m[:, None] * tl.sigmoid(acc_rg)
    # Row r is (b, i, k): stored at [b, h, i, k], so each (b, h) is one contiguous N x N matrix.
    b = rows // NN
    ik = rows % NN
    out_offsets = (b[:, None] * H + hs[None, :]) * NN + ik[:, None]
    both = rmask[:, None] & hmask[None, :]
    tl.store(left_ptr + out_offsets, left, mask=both)
    tl.store(right_ptr + out_offsets, right, mask=both)
    tl.store(gate_ptr + rows[:, None] * H + hs[None, :], tl.sigmoid(acc_og), mask=both)


@triton.jit
def triangle_kernel(left_ptr, right_ptr, tri_ptr, N, H, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    tiles_n = tl.cdiv(N, BN)
    i_tile = tl.program_id(0) // tiles_n
    j_tile = tl.program_id(0) % tiles_n
    bh = tl.program_id(1).to(tl.int64)
    base = bh * N * N
    i = i_tile * BM + tl.arange(0, BM)
    j = j_tile * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], tl.float32)
    for k0 in range(0, N, BK):
        k = k0 + tl.arange(0, BK)
        a = tl.load(left_ptr + base + i[:, None] * N + k[None, :], mask=(i[:, None] < N) & (k[None, :] < N), other=0.0)
        bt = tl.load(right_ptr + base + j[None, :] * N + k[:, None], mask=(j[None, :] < N) & (k[:, None] < N),
                     other=0.0)
        acc += tl.dot(a, bt, input_precision="ieee")
    b = bh // H
    h = bh % H
    offsets = ((b * N + i[:, None]) * N + j[None, :]) * H + h
    tl.store(tri_ptr + offsets, acc, mask=(i[:, None] < N) & (j[None, :] < N))


@triton.jit
def output_kernel(tri_ptr, gate_ptr, w_ptr, b_ptr, to_out_ptr, out_ptr, R, H, C, BM: tl.constexpr,
                  BH: tl.constexpr, BC: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
    hs = tl.arange(0, BH)
    rmask = rows < R
    hmask = hs < H
    both = rmask[:, None] & hmask[None, :]
    t = tl.load(tri_ptr + rows[:, None] * H + hs[None, :], mask=both, other=0.0)
    mean = tl.sum(t, axis=1) / H
    d = tl.where(both, t - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / H + 1e-5)
    w = tl.load(w_ptr + hs, mask=hmask, other=0.0)
    bias = tl.load(b_ptr + hs, mask=hmask, other=0.0)
    g = tl.load(gate_ptr + rows[:, None] * H + hs[None, :], mask=both, other=0.0)
    normed = tl.where(both, (d * rstd[:, None] * w[None, :] + bias[None, :]) * g, 0.0)
    for c0 in range(0, C, BC):
        cs = c0 + tl.arange(0, BC)
        wt = tl.load(to_out_ptr + cs[None, :] * H + hs[:, None], mask=hmask[:, None] & (cs[None, :] < C), other=0.0)
        o = tl.dot(normed, wt, input_precision="ieee")
        tl.store(out_ptr + rows[:, None] * C + cs[None, :], o, mask=rmask[:, None] & (cs[None, :] < C))


def crucible_forward(inputs, outputs):
    x, mask, norm_w, norm_b, lp, rp, lg, rg, og, out_w, out_b, to_out = inputs
    out = outputs[0]
    B, N, _, C = x.shape
    H = lp.shape[0]
    R = B * N * N
    BH = max(16, triton.next_power_of_2(H))
    xn = torch.empty((R, C), device=x.device, dtype=torch.float32)
    left = torch.empty((B, H, N, N), device=x.device, dtype=torch.float32)
    right = torch.empty((B, H, N, N), device=x.device, dtype=torch.float32)
    gate = torch.empty((R, H), device=x.device, dtype=torch.float32)
    tri = torch.empty((R, H), device=x.device, dtype=torch.float32)
    norm_in_kernel[(R,)](x, norm_w, norm_b, xn, C, BLOCK_C=triton.next_power_of_2(C))
    project_kernel[(triton.cdiv(R, 16),)](xn, mask, lp, rp, lg, rg, og, left, right, gate, R, N * N, C, H,
                                          BM=16, BH=BH, BK=32)
    triangle_kernel[(triton.cdiv(N, 64) * triton.cdiv(N, 64), B * H)](left, right, tri, N, H, BM=64, BN=64, BK=32)
    output_kernel[(triton.cdiv(R, 16),)](tri, gate, out_w, out_b, to_out, out, R, H, C, BM=16, BH=BH, BC=64)
