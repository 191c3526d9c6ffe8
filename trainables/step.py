"""TrainStep: the one optimizer step every trial uses.

AMP (bf16/fp16 autocast, GradScaler for fp16), gradient accumulation over a group of
micro-batches (weighted per sample, DDP gradient sync only on the last micro-step),
optional grad-norm clipping and detection of non-finite losses.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from .config import ConfigError

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class DivergedError(RuntimeError):
    """Too many consecutive optimizer steps had a non-finite loss."""


@dataclass
class StepResult:
    loss: float          # mean loss over the group's samples (nan when skipped)
    samples: int         # samples in the group
    correct: int         # correct top-1 predictions in the group
    grad_norm: float     # global grad norm before clipping (nan when skipped)
    applied: bool        # False when the update was skipped (non-finite loss or inf grads)


class TrainStep:
    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 device: torch.device, precision: str = "fp32", grad_clip: float = 0.0,
                 max_nonfinite_steps: int = 5, channels_last: bool = False,
                 scaler: torch.amp.GradScaler | None = None):
        if precision not in DTYPES:
            raise ConfigError(f"precision={precision!r} is not one of {list(DTYPES)}")
        if precision == "fp16" and device.type != "cuda":
            raise ConfigError("precision='fp16' needs a CUDA GPU; use 'bf16' or 'fp32' on CPU")
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.device, self.precision, self.grad_clip = device, precision, grad_clip
        self.max_nonfinite_steps = max_nonfinite_steps
        self.channels_last = channels_last and device.type == "cuda"
        self.non_blocking = device.type == "cuda"
        if scaler is None and precision == "fp16":
            scaler = torch.amp.GradScaler("cuda")
        self.scaler = scaler
        self.nonfinite_in_a_row = 0
        self.nonfinite_total = 0
        self.params = [p for p in model.parameters() if p.requires_grad]
        # Under DDP every rank must agree to skip a step (or to give up), or the ranks drift
        # apart and the one that stops first leaves the others waiting in a collective.
        self.distributed = isinstance(model, nn.parallel.DistributedDataParallel)
        # One buffer for the agreement, reused every step (see RELIABILITY.md for the gloo
        # abort at exit: keeping this tensor alive is not what prevents it).
        self._flags = torch.zeros(2, device=device)

    def to_device(self, x: torch.Tensor) -> torch.Tensor:
        if x.device != self.device:
            x = x.to(self.device, non_blocking=self.non_blocking)
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def autocast(self):
        dtype = DTYPES[self.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    def _sync_context(self, last: bool):
        # Under DDP only the last micro-step all-reduces gradients.
        if not last and hasattr(self.model, "no_sync"):
            return self.model.no_sync()
        return contextlib.nullcontext()

    def __call__(self, group: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> StepResult:
        total = sum(int(y.shape[0]) for _, y in group)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        pending = None  # the last micro-step's loss: its backward syncs gradients across ranks
        oom: torch.OutOfMemoryError | None = None
        try:
            for i, (x, y) in enumerate(group):
                x, y = self.to_device(x), self.to_device(y)
                last = i == len(group) - 1
                with self._sync_context(last=last):
                    with self.autocast():
                        logits = self.model(x)
                        loss = self.loss_fn(logits, y)
                    # Mean loss per micro-batch, weighted by its share of the group's samples,
                    # so a short last group counts each sample once.
                    scaled = loss * (y.shape[0] / total)
                    scaled = self.scaler.scale(scaled) if self.scaler else scaled
                    if last:
                        pending = scaled
                    else:
                        scaled.backward()
                loss_sum += loss.detach().float() * y.shape[0]
                correct += (logits.detach().argmax(1) == y).sum()
        except torch.OutOfMemoryError as e:
            if not self.distributed:
                raise
            oom, pending = e, None
        # The ranks agree before the backward that all-reduces gradients: a rank that ran out
        # of memory or saw a non-finite loss must not leave the others waiting in that collective.
        nonfinite, oom_ranks = self._agree(loss_sum, oom is not None)
        if oom_ranks:
            self.optimizer.zero_grad(set_to_none=True)
            raise oom or torch.OutOfMemoryError(
                f"{oom_ranks} other rank(s) ran out of memory in the same step")
        if nonfinite:
            return self._skip(total)
        pending.backward()
        self.nonfinite_in_a_row = 0
        applied, grad_norm = self._apply()
        return StepResult(float(loss_sum) / total, total, int(correct), grad_norm, applied)

    def _agree(self, loss_sum: torch.Tensor, oom: bool) -> tuple[bool, int]:
        """(any rank saw a non-finite loss, how many ranks ran out of memory): one all-reduce."""
        if not self.distributed:
            return not math.isfinite(float(loss_sum)), 0
        flags = self._flags
        flags[0] = (~torch.isfinite(loss_sum)).float()
        flags[1] = float(oom)
        dist.all_reduce(flags)
        nonfinite, ooms = flags.tolist()
        return nonfinite > 0, int(ooms)

    def _apply(self) -> tuple[bool, float]:
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
        else:
            grads = [p.grad for p in self.params if p.grad is not None]
            norm = torch.nn.utils.get_total_norm(grads) if grads else torch.zeros(())
        if self.scaler is None:
            self.optimizer.step()
            return True, float(norm)
        scale = self.scaler.get_scale()
        self.scaler.step(self.optimizer)     # skips the step itself when grads are inf/nan
        self.scaler.update()
        applied = self.scaler.get_scale() >= scale
        return applied, float(norm)

    def _skip(self, total: int) -> StepResult:
        self.optimizer.zero_grad(set_to_none=True)
        self.nonfinite_in_a_row += 1
        self.nonfinite_total += 1
        if self.nonfinite_in_a_row >= self.max_nonfinite_steps:
            raise DivergedError(f"{self.nonfinite_in_a_row} consecutive steps had a non-finite loss")
        return StepResult(float("nan"), total, 0, float("nan"), False)
