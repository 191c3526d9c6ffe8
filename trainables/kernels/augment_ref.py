"""Plain-PyTorch batch augmentation: the reference the Triton kernel must equal.

augment(images, offsets, flips, scale, shift, out_dtype, padding) works on a whole batch
with tensor indexing (no per-sample Python):
  images   uint8 (N, C, H, W)
  offsets  int (N, 2): crop origin (row, col) inside the image zero-padded by `padding`,
           each in [0, 2 * padding]
  flips    bool (N,): mirror the crop left-right
  scale, shift  float (C,): out = pixel * scale + shift (padding pixels are 0 before this)
Returns (N, C, H, W) in out_dtype with channels_last strides.
"""
from __future__ import annotations

import torch


def augment_torch(images: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor,
                  scale: torch.Tensor, shift: torch.Tensor, out_dtype: torch.dtype = torch.float32,
                  padding: int = 4) -> torch.Tensor:
    n, c, h, w = images.shape
    dev = images.device
    offsets = offsets.to(dev, torch.long)
    rows = torch.arange(h, device=dev).unsqueeze(0) + offsets[:, :1] - padding          # (N, H)
    cols = torch.arange(w, device=dev).unsqueeze(0)
    cols = torch.where(flips.to(dev).view(n, 1), w - 1 - cols, cols) + offsets[:, 1:] - padding  # (N, W)
    valid = ((rows >= 0) & (rows < h)).unsqueeze(2) & ((cols >= 0) & (cols < w)).unsqueeze(1)  # (N, H, W)
    r = rows.clamp(0, h - 1).unsqueeze(2)
    q = cols.clamp(0, w - 1).unsqueeze(1)
    nidx = torch.arange(n, device=dev).view(n, 1, 1)
    # Advanced indices around a slice put the indexed dims first: (N, H, W, C) = NHWC.
    pix = images[nidx, :, r, q]
    pix = pix * valid.unsqueeze(3).to(pix.dtype)
    out = torch.addcmul(shift.to(dev, torch.float32), pix.to(torch.float32), scale.to(dev, torch.float32))
    return out.to(out_dtype).permute(0, 3, 1, 2)
