"""The training config a trial receives: plain dataclasses, no pydantic and no Ray.

The service's experiment schema (tuner/config.py) is built on these classes; the
training side only needs them, so it also runs where neither pydantic nor Ray exist.
Every knob lives here with its unit.  Batch sizes are per worker.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

DATASETS = ("digits", "cifar10", "synthetic")
LOADERS = ("device", "torch")
MODELS = ("convnet", "resnet18", "resnet50", "mobilenet_v3_small", "efficientnet_b0")
OPTIMIZERS = ("sgd", "adamw")
SCHEDULERS = ("none", "cosine", "onecycle", "plateau")
PRECISIONS = ("fp32", "bf16", "fp16")
KERNELS = ("auto", "triton", "torch")
PRUNE_SCOPES = ("global", "layer")
DEVICES = ("auto", "cpu", "cuda")
FAULTS = ("", "nan_loss", "oom")

# Settings that only mean something for the torch DataLoader.
TORCH_LOADER_FIELDS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor",
                       "precomputed_augment")


class ConfigError(ValueError):
    """A training setting that cannot work; the message names the field and the fix."""


@dataclass
class DataConfig:
    dataset: str = "digits"          # digits | cifar10 | synthetic
    data_root: str = "./data"        # folder that holds cifar-10-batches-py/
    download: bool = False           # fetch CIFAR-10 when missing (needs internet)
    cache_dir: str = ".cache/tuner"  # HDF5 caches, shared by all trials on a host
    stage_shm: bool = False          # copy the cache to /dev/shm when it fits
    val_fraction: float = 0.1        # share of the training set held out, seeded
    train_subset: int = 0            # keep the first N training samples; 0 = all
    synthetic_size: int = 2048       # synthetic: number of training images
    synthetic_shape: tuple = (3, 32, 32)  # synthetic: C, H, W
    synthetic_classes: int = 10      # synthetic: number of classes
    loader: str = "device"           # device (resident data, batched augment) | torch (DataLoader)
    num_workers: int = 0             # torch loader: worker processes
    pin_memory: bool = False         # torch loader: page-locked host batches
    persistent_workers: bool = False # torch loader: keep workers between epochs
    prefetch_factor: int = 2         # torch loader: batches prefetched per worker
    drop_last: bool = False          # drop the last short training batch
    precomputed_augment: int = 0     # torch loader: N augmented copies stored in the cache
    augment: bool = True             # random crop + horizontal flip on training batches
    crop_padding: int = 4            # pixels of zero padding for the random crop
    flip: bool = True                # horizontal flips (off for digits)
    eval_test: bool = False          # also report accuracy on the held-out test split


@dataclass
class ModelConfig:
    model: str = "convnet"           # see MODELS
    width: float = 1.0               # convnet channel multiplier
    dropout: float = 0.1             # convnet head dropout probability
    pretrained: str = ""             # path of a local state dict; "" = random init
    freeze_backbone: bool = False    # train only the classification head
    channels_last: bool = True       # NHWC weights and inputs on CUDA


@dataclass
class OptimConfig:
    optimizer: str = "sgd"           # sgd (Nesterov momentum) | adamw
    lr: float = 0.05                 # peak learning rate
    momentum: float = 0.9            # sgd momentum
    weight_decay: float = 5e-4       # L2 (sgd) or decoupled (adamw)
    scheduler: str = "cosine"        # none | cosine | onecycle | plateau
    warmup_epochs: float = 0.0       # linear warmup, in epochs (cosine / none)
    label_smoothing: float = 0.0     # in [0, 0.3]


@dataclass
class StepConfig:
    epochs: int = 10                 # full passes over the training split
    micro_batch_size: int = 64       # samples per forward pass, per worker
    accumulation_steps: int = 1      # micro-batches per optimizer step
    precision: str = "fp32"          # fp32 | bf16 | fp16 (fp16 needs CUDA)
    grad_clip: float = 0.0           # max global grad norm; 0 = no clipping
    max_nonfinite_steps: int = 5     # consecutive non-finite losses before giving up
    kernels: str = "auto"            # auto (Triton on CUDA) | triton | torch
    max_steps_per_epoch: int = 0     # cap optimizer steps per epoch; 0 = no cap


@dataclass
class PruneConfig:
    prune_amount: float = 0.0        # final sparsity of conv/linear weights, in [0, 0.95]
    prune_scope: str = "global"      # global | layer (L1 unstructured)
    prune_start_epoch: int = 1       # first epoch after which weights are pruned
    prune_end_epoch: int = 0         # last pruning epoch (spread linearly); 0 = start only


@dataclass
class RunConfig:
    seed: int = 0                    # seeds weights, splits, shuffles and augmentation
    device: str = "auto"             # auto | cpu | cuda
    workers: int = 1                 # data-parallel workers per trial
    checkpoint_every: int = 1        # epochs between checkpoints
    inject_fault: str = ""           # testing seam: "nan_loss" or "oom" from the first step


SECTIONS = (DataConfig, ModelConfig, OptimConfig, StepConfig, PruneConfig, RunConfig)


@dataclass
class TrainConfig(DataConfig, ModelConfig, OptimConfig, StepConfig, PruneConfig, RunConfig):
    """All training settings, flat: search entries and `--set` address them by field name."""

    @property
    def global_batch_size(self) -> int:
        return self.micro_batch_size * self.accumulation_steps * self.workers

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown training setting(s) {unknown}; known: {sorted(known)}")
        vals = dict(values)
        if "synthetic_shape" in vals:
            vals["synthetic_shape"] = tuple(vals["synthetic_shape"])
        return cls(**vals)

    def replace(self, **changes: Any) -> "TrainConfig":
        return dataclasses.replace(self, **changes)


def check(cfg: TrainConfig, device_type: str) -> None:
    """Refuse settings that cannot work on this device, before anything starts."""
    problems = problems_of(cfg, has_gpu=(device_type == "cuda"))
    if problems:
        raise ConfigError("; ".join(problems))


def problems_of(cfg: TrainConfig, has_gpu: bool) -> list[str]:
    """Rules that hold for every training config; the service adds YAML paths to these."""
    p: list[str] = []

    def one_of(name: str, allowed: tuple) -> None:
        value = getattr(cfg, name)
        if value not in allowed:
            p.append(f"{name}={value!r} is not one of {list(allowed)}")

    for name, allowed in (("dataset", DATASETS), ("loader", LOADERS), ("model", MODELS),
                          ("optimizer", OPTIMIZERS), ("scheduler", SCHEDULERS),
                          ("precision", PRECISIONS), ("kernels", KERNELS),
                          ("prune_scope", PRUNE_SCOPES), ("device", DEVICES), ("inject_fault", FAULTS)):
        one_of(name, allowed)
    if cfg.precision == "fp16" and not has_gpu:
        p.append("precision='fp16' needs a CUDA GPU (GradScaler and fp16 autocast); "
                 "use precision='bf16' or 'fp32' on CPU")
    if cfg.device == "cuda" and not has_gpu:
        p.append("device='cuda' but no CUDA GPU is available; use device='auto' or 'cpu'")
    for name in ("micro_batch_size", "accumulation_steps", "epochs", "workers", "checkpoint_every"):
        if getattr(cfg, name) < 1:
            p.append(f"{name}={getattr(cfg, name)!r} must be >= 1")
    if not 0.0 <= cfg.prune_amount <= 0.95:
        p.append(f"prune_amount={cfg.prune_amount!r} must be in [0, 0.95]")
    if not 0.0 <= cfg.label_smoothing <= 0.3:
        p.append(f"label_smoothing={cfg.label_smoothing!r} must be in [0, 0.3]")
    if not 0.0 < cfg.val_fraction < 1.0:
        p.append(f"val_fraction={cfg.val_fraction!r} must be in (0, 1)")
    if cfg.lr <= 0:
        p.append(f"lr={cfg.lr!r} must be > 0")
    if cfg.num_workers < 0:
        p.append(f"num_workers={cfg.num_workers!r} must be >= 0")
    if cfg.loader == "device":
        defaults = DataConfig()
        for name in TORCH_LOADER_FIELDS:
            if getattr(cfg, name) != getattr(defaults, name):
                p.append(f"{name}={getattr(cfg, name)!r} only applies to loader='torch'; "
                         f"remove it or set loader: torch")
    if cfg.prune_end_epoch and cfg.prune_end_epoch < cfg.prune_start_epoch:
        p.append(f"prune_end_epoch={cfg.prune_end_epoch} is before prune_start_epoch="
                 f"{cfg.prune_start_epoch}")
    return p
