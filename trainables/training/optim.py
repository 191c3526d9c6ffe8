"""The optimizer, the LR schedule and the loss a trial trains with, built from its config."""
from __future__ import annotations

import math

import torch
from torch import nn

from trainables.config import TrainConfig
from trainables.training import kernels


def build_optimizer(cfg: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """The fused implementation where the parameters allow it: one kernel per step, and it
    skips a step on the device when TrainStep flags non-finite values (no host read)."""
    params = [p for p in model.parameters() if p.requires_grad]
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused or None)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.momentum > 0,
                           weight_decay=cfg.weight_decay, fused=fused or None)


def build_scheduler(cfg: TrainConfig, opt: torch.optim.Optimizer, steps_per_epoch: int):
    """Per-step schedules (cosine, one-cycle, warmup) or per-epoch plateau; None for constant."""
    total = max(1, cfg.epochs * steps_per_epoch)
    warm = int(cfg.warmup_epochs * steps_per_epoch)
    if cfg.scheduler == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=total + 1)
    if cfg.scheduler == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.2, patience=1)
    if cfg.scheduler == "none" and warm == 0:
        return None

    def factor(s: int) -> float:
        if s < warm:
            return (s + 1) / warm
        if cfg.scheduler == "none":
            return 1.0
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (s - warm) / max(1, total - warm))))
    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def make_loss(cfg: TrainConfig, impl: str):
    def loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return kernels.cross_entropy(logits, y, cfg.label_smoothing, impl=impl)
    return loss_fn
