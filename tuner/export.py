"""Export of the best trial.

Export writes best_config.yaml (re-runnable with `tuner train`), the full checkpoint,
model.pt weights (pruning made permanent), model.pt2 (torch.export), model.ts
(TorchScript), an int8 model when torchao is installed, and metrics.json with the
held-out test accuracy of the exported weights.  Exported models take normalised
inputs; metrics.json carries the mean and std to normalise with.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
import yaml

from trainables.config import TrainConfig
from trainables.data.loaders import DeviceLoader
from trainables.data.sources import load_data
from trainables.runtime import checkpoint as ckpt_io
from trainables.training.models import build_model
from trainables.training.pruning import make_permanent, restore_masks

from .experiment import load_saved, local_checkpoint
from .results import select, trials
from .schema import ExperimentError, branch_taken

# ---------------------------------------------------------------- export


def restore_model(payload: dict[str, Any]) -> tuple[torch.nn.Module, TrainConfig]:
    cfg = TrainConfig.from_dict(payload["config"])
    info = payload["model_info"]
    model = build_model(cfg.replace(pretrained="", freeze_backbone=False), info["in_channels"], info["num_classes"])
    restore_masks(model, payload["model"])
    model.load_state_dict(payload["model"])
    make_permanent(model)
    return model.eval(), cfg


def eval_batches(cfg: TrainConfig, *splits: str, batch_size: int = 512) -> tuple[list, ...]:
    """Each named split's batches exactly as validation saw them: normalised, not augmented,
    on CPU.  The data set is loaded once for all of them."""
    data = load_data(cfg, cfg.seed)
    scale, shift = data.scale_shift
    return tuple(list(DeviceLoader(getattr(data, split), batch_size=batch_size, device=torch.device("cpu"),
                                   scale=scale, shift=shift, out_dtype=torch.float32, train=False, augment=False,
                                   padding=cfg.crop_padding, flip=False, seed=cfg.seed))
                 for split in splits)


@torch.inference_mode()
def accuracy(model, batches) -> float:
    correct = total = 0
    for x, y in batches:
        correct += int((model(x).argmax(1) == y).sum())
        total += len(y)
    return correct / max(total, 1)


def export(exp_dir: str | Path, out: str | Path, rule: str | None = None, force: bool = False) -> dict[str, Any]:
    exp = load_saved(exp_dir)
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise ExperimentError(str(out), ["the output folder is not empty; choose another --out or pass --force"])
    row = select(exp, trials(exp), rule)
    if not row.checkpoint:
        raise ExperimentError(exp.location, [f"trial {row.trial_id} has no checkpoint to export"])
    checkpoint = local_checkpoint(exp, row.checkpoint)
    payload = ckpt_io.load(checkpoint)
    model, cfg = restore_model(payload)
    val, test = eval_batches(cfg, "val", "test")
    example = val[0][0][:2]
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    best_cfg = cfg.replace(epochs=exp.budget.max_epochs, workers=1, eval_test=True, device="auto").to_dict()
    branch = branch_taken(exp.search, row.config)
    (out / "best_config.yaml").write_text(
        f"# Best trial {row.trial_id} of {exp.name}; re-run with: python -m tuner train {out / 'best_config.yaml'}\n"
        + (f"# Branch of the search space: {', '.join(branch)}\n" if branch else "")
        + yaml.safe_dump(best_cfg, sort_keys=False))
    ckpt_io.copy(Path(checkpoint) / ckpt_io.FILENAME, out / "checkpoint.pt")
    torch.save(model.state_dict(), out / "model.pt")
    batch = ({0: torch.export.Dim.DYNAMIC},)  # any batch size, not just the example's
    torch.export.save(torch.export.export(model, (example,), dynamic_shapes=batch), out / "model.pt2")
    with warnings.catch_warnings():
        # torch 2.14 marks TorchScript deprecated (torch.export is the successor); the
        # .ts file is still written for runtimes that only load TorchScript.
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(model, example), out / "model.ts")
    files["int8"] = _int8(model, out)
    metrics = {"trial_id": row.trial_id, "metric": exp.metric, "reported": {k: row.metrics.get(k) for k in (
        "epoch", "val_acc", "val_loss", "sparsity", "samples_per_s") if k in row.metrics},
        "val_acc": accuracy(model, val), "test_acc": accuracy(model, test),
        "params": row.params, "branch": branch, "input": {"shape": list(example.shape[1:]), "normalise_mean": payload["model_info"]["mean"],
                                        "normalise_std": payload["model_info"]["std"], "pixel_scale": "0-255"},
        "files": sorted(p.name for p in out.iterdir()), "int8": files["int8"]}
    metrics["files"] = sorted(set(metrics["files"]) | {"metrics.json"})
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str))
    return metrics


def _int8(model: torch.nn.Module, out: Path) -> str:
    try:
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
    except Exception:  # noqa: BLE001 - torchao absent or broken: the int8 copy is optional
        return "skipped: torchao is not installed"
    import copy
    q = copy.deepcopy(model)
    quantize_(q, Int8WeightOnlyConfig())
    torch.save(q.state_dict(), out / "model_int8.pt")
    return "model_int8.pt (torchao int8 weight-only)"
