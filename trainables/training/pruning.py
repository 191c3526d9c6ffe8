"""L1 unstructured pruning of conv and linear weights (torch.nn.utils.prune).

Masks live in the module (weight = weight_orig * weight_mask, recomputed each forward),
so the sparsity survives optimizer steps; `make_permanent` folds them in before export.
"""
from __future__ import annotations

from torch import nn
from torch.nn.utils import prune

from trainables.config import PruneConfig


def prunable(model: nn.Module) -> list[tuple[nn.Module, str]]:
    return [(m, "weight") for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


def sparsity(model: nn.Module) -> float:
    zeros = total = 0
    for m, name in prunable(model):
        w = getattr(m, name + "_orig", None)
        w = w * getattr(m, name + "_mask") if w is not None else getattr(m, name)
        zeros += int((w == 0).sum())
        total += w.numel()
    return zeros / max(total, 1)


def target_sparsity(cfg: PruneConfig, epoch: int) -> float:
    """Sparsity wanted after `epoch` (1-based): 0 before the start, then linear up to
    `prune_amount` at the end epoch."""
    if cfg.prune_amount <= 0 or epoch < cfg.prune_start_epoch:
        return 0.0
    end = max(cfg.prune_end_epoch, cfg.prune_start_epoch)
    done = min(epoch, end) - cfg.prune_start_epoch + 1
    return cfg.prune_amount * done / (end - cfg.prune_start_epoch + 1)


def prune_to(model: nn.Module, target: float, scope: str = "global") -> float:
    """Raise the model's sparsity to `target` by L1 magnitude; returns the new sparsity."""
    params = prunable(model)
    if scope == "global":
        current = sparsity(model)
        if target > current + 1e-9:
            # torch's container applies `amount` to the still-unpruned weights.
            rel = (target - current) / (1.0 - current)
            prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=rel)
    else:
        for m, name in params:
            w = getattr(m, name)
            current = float((w == 0).sum()) / w.numel()
            if target > current + 1e-9:
                prune.l1_unstructured(m, name, amount=(target - current) / (1.0 - current))
    return sparsity(model)


def restore_masks(model: nn.Module, state_dict: dict) -> None:
    """Re-create pruning masks named in a checkpoint so its state dict loads."""
    for mod_name, m in model.named_modules():
        key = f"{mod_name}.weight_mask" if mod_name else "weight_mask"
        if key in state_dict and not hasattr(m, "weight_mask"):
            prune.custom_from_mask(m, "weight", state_dict[key].to(m.weight.device))


def make_permanent(model: nn.Module) -> nn.Module:
    for m, name in prunable(model):
        if prune.is_pruned(m) and hasattr(m, name + "_mask"):
            prune.remove(m, name)
    return model
