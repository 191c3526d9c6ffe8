"""TrainStep: the one optimizer step every trial uses.

AMP (bf16/fp16 autocast, GradScaler for fp16), gradient accumulation over a group of
micro-batches (weighted per sample, DDP gradient sync only on the last micro-step),
optional grad-norm clipping and detection of non-finite losses.

The step does not wait for the device.  Loss, accuracy and grad-norm sums stay on the
device; a step with a non-finite loss or gradient norm (on any rank) is skipped on the
device through the fused optimizer's found-inf flag, as GradScaler does.  The host reads
the device once every `sync_every` steps (`sync()`) and at the epoch's end
(`epoch_totals()`): that is where `max_nonfinite_steps` consecutive bad steps raise
DivergedError and where the ranks learn that one of them ran out of memory.  Under DDP a
rank that ran out of memory takes part in the step's collectives with a zero loss until then.
An optimizer that is not fused cannot skip on the device: the step then reads the host
every step (and agrees before the backward), as a fallback.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from trainables import _compat
from trainables.config import ConfigError

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}

# Slots of the device-side accumulator (one host read gives them all).
LOSS, CORRECT, COUNTED, NORM, APPLIED, SAMPLES, RUN, MAXRUN, NONFINITE, OOM = range(10)


class DivergedError(RuntimeError):
    """Too many consecutive optimizer steps had a non-finite loss."""


class StepResult:
    """One step's figures, kept on the device; reading one reads the host (tests, tools)."""

    def __init__(self, loss: torch.Tensor, samples: int, correct: torch.Tensor, grad_norm: torch.Tensor,
                 applied: torch.Tensor):
        self._loss, self.samples, self._correct, self._norm, self._applied = loss, samples, correct, grad_norm, applied

    @property
    def loss(self) -> float:          # mean loss over the group's samples (nan when skipped)
        return float(self._loss) if self.applied else float("nan")

    @property
    def correct(self) -> int:         # correct top-1 predictions in the group
        return int(self._correct) if self.applied else 0

    @property
    def grad_norm(self) -> float:     # global grad norm before clipping (nan when skipped)
        return float(self._norm) if self.applied else float("nan")

    @property
    def applied(self) -> bool:        # False when the update was skipped (non-finite loss or grads)
        return bool(self._applied)


def fused_optimizers_skip_on_device(optimizer: torch.optim.Optimizer) -> bool:
    return bool(optimizer.defaults.get("fused"))


class TrainStep:
    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 device: torch.device, precision: str = "fp32", grad_clip: float = 0.0,
                 max_nonfinite_steps: int = 5, channels_last: bool = False,
                 scaler: torch.amp.GradScaler | None = None, sync_every: int = 16):
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
        self.on_device = fused_optimizers_skip_on_device(optimizer)
        self.sync_every = sync_every if self.on_device else 1
        self.nonfinite_total = 0          # as of the last sync
        self.params = [p for p in model.parameters() if p.requires_grad]
        # Under DDP every rank must agree to skip a step (or to give up), or the ranks drift
        # apart and the one that stops first leaves the others waiting in a collective.
        self.distributed = isinstance(model, nn.parallel.DistributedDataParallel)
        self._flags = torch.zeros(2, device=device)   # [non-finite loss, out of memory], summed over ranks
        self._acc = torch.zeros(10, dtype=torch.float64, device=device)
        self._since_sync = 0
        self._oom: torch.OutOfMemoryError | None = None

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

    def _forward(self, group, total: int):
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        pending = None  # the last micro-step's loss: its backward syncs gradients across ranks
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
        return loss_sum, correct, pending

    def _stand_in(self, group) -> torch.Tensor:
        """After running out of memory under DDP: a zero loss from one sample through the model,
        so this rank still joins the step's gradient all-reduce (the step is skipped everywhere)."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        x = self.to_device(group[-1][0][:1])
        with self.autocast():
            return self.model(x).float().sum() * 0.0

    def __call__(self, group: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> StepResult:
        total = sum(int(y.shape[0]) for _, y in group)
        self.optimizer.zero_grad(set_to_none=True)
        oom = None
        try:
            loss_sum, correct, pending = self._forward(group, total)
        except torch.OutOfMemoryError as e:
            if not self.distributed:
                raise
            oom, self._oom = e, self._oom or e
            loss_sum = torch.zeros((), device=self.device)
            correct = torch.zeros((), device=self.device, dtype=torch.long)
            pending = None
        flags = self._flags
        flags[0] = (~torch.isfinite(loss_sum)).float()
        flags[1].fill_(1.0 if oom is not None else 0.0)   # `flags[1] = 0.0` copies from the host: a sync on CUDA
        if self.distributed:
            dist.all_reduce(flags)   # no host read: the result stays on the device
        if not self.on_device:
            return self._host_step(group, total, loss_sum, correct, pending, oom)
        if pending is None:
            pending = self._stand_in(group)
        pending.backward()
        norm = self._unscale_and_norm()
        bad = (flags[0] > 0) | (flags[1] > 0) | ~torch.isfinite(norm)
        self._step_optimizer(bad)
        self._account(loss_sum, correct, norm, total, bad, flags[1])
        self._since_sync += 1
        if self._since_sync >= self.sync_every:
            self.sync()
        return StepResult(loss_sum / total, total, correct, norm, ~bad)

    def _host_step(self, group, total, loss_sum, correct, pending, oom) -> StepResult:
        """The fallback for an optimizer that is not fused: agree on the host before the backward."""
        nonfinite, ooms = self._flags.tolist()
        if ooms:
            self.optimizer.zero_grad(set_to_none=True)
            raise oom or torch.OutOfMemoryError(f"{int(ooms)} other rank(s) ran out of memory in the same step")
        norm = torch.full((), float("nan"), device=self.device)
        if not nonfinite:
            pending.backward()
            norm = self._unscale_and_norm()
            if self.scaler is not None:
                self.scaler.step(self.optimizer)     # skips the step itself when grads are inf/nan
                self.scaler.update()
            elif torch.isfinite(norm):
                self.optimizer.step()
        bad = torch.tensor(bool(nonfinite) or not bool(torch.isfinite(norm)), device=self.device)
        self._account(loss_sum, correct, norm, total, bad, torch.zeros((), device=self.device))
        self.sync()
        return StepResult(loss_sum / total, total, correct, norm, ~bad)

    def _unscale_and_norm(self) -> torch.Tensor:
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.grad_clip > 0:
            return torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
        grads = [p.grad for p in self.params if p.grad is not None]
        return torch.nn.utils.get_total_norm(grads) if grads else torch.zeros((), device=self.device)

    def _step_optimizer(self, bad: torch.Tensor) -> None:
        if self.scaler is not None:
            # GradScaler hands its own found-inf flag (inf/nan gradients) to the fused optimizer.
            self.scaler.step(self.optimizer)
            self.scaler.update()
            return
        with _compat.skip_step_if(self.optimizer, bad):
            self.optimizer.step()

    def _account(self, loss_sum, correct, norm, total, bad, ooms) -> None:
        acc = self._acc
        figures = torch.stack([loss_sum.double(), correct.double(), torch.full_like(acc[0], total),
                               norm.double(), torch.ones_like(acc[0])])
        acc[LOSS:SAMPLES] += torch.where(bad, torch.zeros_like(figures), figures)
        acc[SAMPLES] += total
        acc[RUN] = torch.where(bad, acc[RUN] + 1, torch.zeros_like(acc[RUN]))
        acc[MAXRUN] = torch.maximum(acc[MAXRUN], acc[RUN])
        acc[NONFINITE] += bad.double()
        acc[OOM] = torch.maximum(acc[OOM], ooms.double())   # ranks out of memory in one step, at most

    def _check(self, values: list[float]) -> None:
        self.nonfinite_total = int(values[NONFINITE])
        if values[OOM]:
            self.optimizer.zero_grad(set_to_none=True)
            if self._oom is not None:
                raise self._oom
            raise torch.OutOfMemoryError(f"{int(values[OOM])} other rank(s) ran out of memory")
        if values[MAXRUN] >= self.max_nonfinite_steps:
            raise DivergedError(f"{int(values[MAXRUN])} consecutive steps had a non-finite loss")
        self._acc[MAXRUN] = self._acc[RUN]

    def sync(self) -> None:
        """Read the device (one host read): raise DivergedError or OutOfMemoryError, on every
        rank alike, when the steps since the last sync call for it."""
        self._since_sync = 0
        self._check(self._acc.tolist())

    def epoch_totals(self) -> dict[str, float]:
        """This rank's sums since the last call, after a sync: loss and correct over the applied
        steps' samples, `counted` of those, `samples` run, the grad-norm sum and applied steps."""
        self._since_sync = 0
        values = self._acc.tolist()
        self._check(values)
        self._acc[LOSS:RUN].zero_()
        return {"loss_sum": values[LOSS], "correct": values[CORRECT], "counted": values[COUNTED],
                "norm_sum": values[NORM], "applied": values[APPLIED], "samples": values[SAMPLES]}
