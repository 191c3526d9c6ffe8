"""Plain-PyTorch label-smoothed cross-entropy (mean over the batch): the reference.

Computed in fp32 like the Triton kernel, so bf16/fp16 logits under autocast compare.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def cross_entropy_torch(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    return F.cross_entropy(logits.float(), target, label_smoothing=label_smoothing)
