"""Fused softmax cross-entropy with label smoothing in Triton (mean over the batch).

Forward and backward each read a row of logits once; the smoothed target distribution
is never materialised: loss = (1 - e) * (lse - x[t]) + e * (lse - mean(x)), and the
gradient is softmax(x) - e / C - (1 - e) * onehot(t), scaled by grad / N.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_CLASSES = 1 << 16


@triton.jit
def ce_fwd_kernel(x_ptr, t_ptr, loss_ptr, lse_ptr, C, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    live = cols < C
    x = tl.load(x_ptr + row * stride + cols, mask=live, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    lse = m + tl.log(tl.sum(tl.where(live, tl.exp(x - m), 0.0), axis=0))
    t = tl.load(t_ptr + row)
    xt = tl.sum(tl.where(cols == t, x, 0.0), axis=0)
    mean_x = tl.sum(tl.where(live, x, 0.0), axis=0) / C
    loss = (1.0 - eps) * (lse - xt) + eps * (lse - mean_x)
    tl.store(loss_ptr + row, loss)
    tl.store(lse_ptr + row, lse)


@triton.jit
def ce_bwd_kernel(x_ptr, t_ptr, lse_ptr, g_ptr, dx_ptr, C, stride, eps, inv_n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    live = cols < C
    x = tl.load(x_ptr + row * stride + cols, mask=live, other=0.0).to(tl.float32)
    lse = tl.load(lse_ptr + row)
    t = tl.load(t_ptr + row)
    g = tl.load(g_ptr) * inv_n
    p = tl.exp(x - lse)
    d = p - eps / C - tl.where(cols == t, 1.0 - eps, 0.0)
    tl.store(dx_ptr + row * C + cols, (d * g).to(dx_ptr.dtype.element_ty), mask=live)


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, eps: float) -> torch.Tensor:
        n, c = logits.shape
        if c > MAX_CLASSES:
            raise ValueError(f"the Triton cross-entropy handles up to {MAX_CLASSES} classes, got {c}")
        x = logits.float().contiguous()  # autocast casts on CUDA; this covers CPU (interpreter) too
        target = target.contiguous()
        loss = torch.empty(n, dtype=torch.float32, device=x.device)
        lse = torch.empty(n, dtype=torch.float32, device=x.device)
        block = triton.next_power_of_2(c)
        ce_fwd_kernel[(n,)](x, target, loss, lse, c, x.stride(0), float(eps), BLOCK=block)
        ctx.save_for_backward(x, target, lse)
        ctx.eps, ctx.block, ctx.in_dtype = float(eps), block, logits.dtype
        return loss.sum() / n

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad: torch.Tensor):
        x, target, lse = ctx.saved_tensors
        n, c = x.shape
        dx = torch.empty_like(x)
        ce_bwd_kernel[(n,)](x, target, lse, grad.float().contiguous(), dx, c, x.stride(0), ctx.eps, 1.0 / n,
                      BLOCK=ctx.block)
        return dx.to(ctx.in_dtype), None, None


def cross_entropy_triton(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    return _CrossEntropy.apply(logits, target, label_smoothing)
