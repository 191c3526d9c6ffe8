"""Kernels and their dispatcher: `kernels: auto | triton | torch`.

auto picks Triton on CUDA and the plain-PyTorch reference elsewhere; the Triton
interpreter (TRITON_INTERPRET=1) counts as a place Triton can run.  `triton` is only
imported when a Triton kernel is chosen, so this package imports without it.
"""
from __future__ import annotations

import importlib.util

import torch

from trainables.config import ConfigError
from trainables.training.kernels.augment_ref import augment_torch
from trainables.training.kernels.cross_entropy_ref import cross_entropy_torch

__all__ = ["augment", "augment_torch", "cross_entropy", "cross_entropy_torch", "resolve", "triton_reason"]


def interpreting() -> bool:
    from trainables import settings
    return settings.read().triton_interpret


def triton_reason(device: torch.device) -> str | None:
    """Why Triton cannot run on `device`, or None when it can."""
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed"
    if device.type != "cuda" and not interpreting():
        return f"Triton kernels need a CUDA device (this run is on {device.type}; TRITON_INTERPRET=1 runs them on CPU for tests)"
    return None


def resolve(kernels: str, device: torch.device) -> str:
    """'auto' | 'triton' | 'torch' -> the implementation to use; refuses impossible asks."""
    if kernels == "torch":
        return "torch"
    reason = triton_reason(device)
    if kernels == "triton":
        if reason:
            raise ConfigError(f"kernels='triton' cannot run here: {reason}; use kernels: auto or torch")
        return "triton"
    if kernels == "auto":
        return "triton" if reason is None and device.type == "cuda" else "torch"
    raise ConfigError(f"kernels={kernels!r} is not one of auto, triton, torch")


def augment(images, offsets, flips, scale, shift, out_dtype=torch.float32, padding: int = 4, impl: str = "torch",
            index=None, prepadded: bool = False):
    """See augment_ref.augment_torch; `index`/`prepadded` read a batch straight from
    resident data padded once."""
    if impl == "triton":
        from trainables.training.kernels.augment_triton import augment_triton
        return augment_triton(images, offsets, flips, scale, shift, out_dtype, padding, index, prepadded)
    return augment_torch(images, offsets, flips, scale, shift, out_dtype, padding, index, prepadded)


def cross_entropy(logits, target, label_smoothing: float = 0.0, impl: str = "torch"):
    if impl == "triton":
        from trainables.training.kernels.cross_entropy_triton import (
            cross_entropy_triton,
        )
        return cross_entropy_triton(logits, target, label_smoothing)
    return cross_entropy_torch(logits, target, label_smoothing)
