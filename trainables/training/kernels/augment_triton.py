"""Fused batch augmentation in Triton: one pass from uint8 NCHW to a normalised
channels_last tensor (crop from the zero-padded image, mirror, x * scale + shift).

Same contract as augment_ref.augment_torch; imported only when Triton is chosen.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def augment_kernel(img_ptr, idx_ptr, off_ptr, flip_ptr, scale_ptr, shift_ptr, out_ptr,
                    total, C, H, W, s_n, s_c, s_h, s_w, pad, src_pad, BLOCK: tl.constexpr):
    # Each program writes BLOCK consecutive elements of the NHWC output.  The source is
    # either the batch itself (src_pad 0) or resident data padded by src_pad, read at idx.
    j = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = j < total
    c = j % C
    x = (j // C) % W
    y = (j // (C * W)) % H
    n = j // (C * W * H)
    src = tl.load(idx_ptr + n, mask=live, other=0)
    dy = tl.load(off_ptr + 2 * n, mask=live, other=0)
    dx = tl.load(off_ptr + 2 * n + 1, mask=live, other=0)
    fl = tl.load(flip_ptr + n, mask=live, other=0)
    xs = tl.where(fl != 0, W - 1 - x, x)
    sy = y + dy - pad + src_pad
    sx = xs + dx - pad + src_pad
    inside = live & (sy >= 0) & (sy < H + 2 * src_pad) & (sx >= 0) & (sx < W + 2 * src_pad)
    pix = tl.load(img_ptr + src * s_n + c * s_c + sy * s_h + sx * s_w, mask=inside, other=0)
    v = pix.to(tl.float32) * tl.load(scale_ptr + c, mask=live, other=0.0)
    v = v + tl.load(shift_ptr + c, mask=live, other=0.0)
    tl.store(out_ptr + j, v.to(out_ptr.dtype.element_ty), mask=live)


def augment_triton(images: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor, scale: torch.Tensor,
                   shift: torch.Tensor, out_dtype: torch.dtype = torch.float32, padding: int = 4,
                   index: torch.Tensor | None = None, prepadded: bool = False) -> torch.Tensor:
    src_pad = padding if prepadded else 0
    total_src, c, hs, ws = images.shape
    h, w = hs - 2 * src_pad, ws - 2 * src_pad
    dev = images.device
    index = torch.arange(total_src, device=dev) if index is None else index
    index = index.to(dev, torch.int64).contiguous()
    n = len(index)
    out = torch.empty((n, h, w, c), dtype=out_dtype, device=dev)
    total = out.numel()
    if total == 0:
        return out.permute(0, 3, 1, 2)
    offsets = offsets.to(dev, torch.int32).contiguous()
    flips = flips.to(dev, torch.int8).contiguous()
    scale = scale.to(dev, torch.float32).contiguous()
    shift = shift.to(dev, torch.float32).contiguous()
    grid = (triton.cdiv(total, BLOCK),)
    augment_kernel[grid](images, index, offsets, flips, scale, shift, out, total, c, h, w, *images.stride(),
                          padding, src_pad, BLOCK=BLOCK)
    return out.permute(0, 3, 1, 2)
