"""Plain-PyTorch batch augmentation: the reference the Triton kernel must equal.

augment(images, offsets, flips, scale, shift, out_dtype, padding) works on a whole batch
with tensor ops (no per-sample Python):
  images   uint8 (N, C, H, W)
  offsets  int (N, 2): crop origin (row, col) inside the image zero-padded by `padding`,
           each in [0, 2 * padding]
  flips    bool (N,): mirror the crop left-right
  scale, shift  float (C,): out = pixel * scale + shift, a multiply then an add in fp32
           (padding pixels are 0 before this)
Returns (N, C, H, W) in out_dtype with channels_last strides.

For resident data the loader pads the whole set once and passes `prepadded=True` with
`index` (the batch's sample numbers): the batch gather and the padding then happen in
the crop itself instead of as two extra passes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def augment_torch(images: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor,
                  scale: torch.Tensor, shift: torch.Tensor, out_dtype: torch.dtype = torch.float32,
                  padding: int = 4, index: torch.Tensor | None = None, prepadded: bool = False) -> torch.Tensor:
    dev = images.device
    padded = images if prepadded else F.pad(images, (padding, padding, padding, padding))
    total, c, hp, wp = padded.shape
    h, w = hp - 2 * padding, wp - 2 * padding
    index = torch.arange(total, device=dev) if index is None else index.to(dev, torch.long)
    n = len(index)
    offsets, flips = offsets.to(dev, torch.long), flips.to(dev, torch.bool)
    k = 2 * padding + 1
    s = padded.stride()
    # A view of every vertical crop position of every sample; one advanced index picks each
    # batch sample at its row offset: (N, C, H, W+2p).
    rows = padded.as_strided((total, k, c, h, wp), (s[0], s[2], s[1], s[2], s[3]))[index, offsets[:, 0]]
    xs = torch.arange(w, device=dev)
    cols = torch.where(flips.view(n, 1), w - 1 - xs, xs) + offsets[:, 1:]           # (N, W)
    crop = torch.gather(rows, 3, cols.view(n, 1, 1, w).expand(n, c, h, w))
    out = torch.empty((n, h, w, c), dtype=torch.float32, device=dev)              # NHWC memory
    torch.mul(crop.permute(0, 2, 3, 1), scale.to(dev, torch.float32), out=out)
    out.add_(shift.to(dev, torch.float32))
    if out_dtype != torch.float32:
        out = out.to(out_dtype)
    return out.permute(0, 3, 1, 2)
