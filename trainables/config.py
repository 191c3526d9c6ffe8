"""The training config a trial receives: plain dataclasses, no pydantic and no Ray.

The service's experiment schema (tuner/config.py) is built on these classes; the
training side only needs them, so it also runs where neither pydantic nor Ray exist.
Every knob lives here with its unit, and each numeric one with its range beside it: an upper
bound included that no real run needs to pass, so a typo (epochs: 1e9) is refused before a
run starts, not hours into it.  Batch sizes are per worker.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
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

# Settings that only mean something for the torch DataLoader.
TORCH_LOADER_FIELDS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor",
                       "precomputed_augment")


BOUND_KEYS = ("ge", "gt", "le", "lt")


def bounded(default: float, **limits: float):
    """A numeric setting with its valid range (ge/gt/le/lt), declared beside the field: the
    service's schema and problems_of both read it from the field's metadata."""
    assert limits and set(limits) <= set(BOUND_KEYS), limits
    return field(default=default, metadata={"bounds": limits})


def range_text(limits: dict[str, float]) -> str:
    """{'gt': 0, 'lt': 1} -> '(0, 1)'; {'ge': 1} -> '>= 1'."""
    lo = ("[", limits["ge"]) if "ge" in limits else ("(", limits["gt"]) if "gt" in limits else None
    hi = ("]", limits["le"]) if "le" in limits else (")", limits["lt"]) if "lt" in limits else None
    if lo and hi:
        return f"in {lo[0]}{lo[1]:g}, {hi[1]:g}{hi[0]}"
    if lo:
        return f"{'>=' if lo[0] == '[' else '>'} {lo[1]:g}"
    assert hi is not None
    return f"{'<=' if hi[0] == ']' else '<'} {hi[1]:g}"


def breaks(value: float, limits: dict[str, float]) -> bool:
    """True when value lies outside the range (a non-finite number always does)."""
    if not math.isfinite(value):
        return True
    return (("ge" in limits and value < limits["ge"]) or ("gt" in limits and value <= limits["gt"])
            or ("le" in limits and value > limits["le"]) or ("lt" in limits and value >= limits["lt"]))


class ConfigError(ValueError):
    """A training setting that cannot work; the message names the field and the fix."""


@dataclass
class DataConfig:
    dataset: str = "digits"          # digits | cifar10 | synthetic
    data_root: str = "./data"        # folder that holds cifar-10-batches-py/
    download: bool = False           # fetch CIFAR-10 when missing (needs internet)
    cache_dir: str = ".cache/tuner"  # HDF5 caches, shared by all trials on a host
    val_fraction: float = bounded(0.1, gt=0, lt=1)        # share of the training set held out, seeded
    train_subset: int = bounded(0, ge=0, le=100_000_000)  # keep the first N training samples; 0 = all
    synthetic_size: int = bounded(2048, ge=1, le=10_000_000)  # synthetic: number of training images
    synthetic_shape: tuple = (3, 32, 32)  # synthetic: C (1-16), H, W (8-1024 pixels)
    synthetic_classes: int = bounded(10, ge=2, le=100_000)  # synthetic: number of classes
    loader: str = "device"           # device (resident data, batched augment) | torch (DataLoader)
    num_workers: int = bounded(0, ge=0, le=64)             # torch loader: worker processes
    pin_memory: bool = False         # torch loader: page-locked host batches
    persistent_workers: bool = False # torch loader: keep workers between epochs
    prefetch_factor: int = bounded(2, ge=1, le=64)  # torch loader: batches prefetched per worker
    drop_last: bool = False          # drop the last short training batch
    precomputed_augment: int = bounded(0, ge=0, le=32)     # torch loader: N augmented copies stored in the cache
    augment: bool = True             # random crop + horizontal flip on training batches
    crop_padding: int = bounded(4, ge=0, le=16)            # pixels of zero padding for the random crop
    flip: bool = True                # horizontal flips (off for digits)
    eval_test: bool = False          # also report accuracy on the held-out test split


@dataclass
class ModelConfig:
    model: str = "convnet"           # see MODELS
    width: float = bounded(1.0, gt=0, le=8)               # convnet channel multiplier
    dropout: float = bounded(0.1, ge=0, lt=1)             # convnet head dropout probability
    pretrained: str = ""             # path of a local state dict; "" = random init
    freeze_backbone: bool = False    # train only the classification head
    channels_last: bool = True       # NHWC weights and inputs on CUDA


@dataclass
class OptimConfig:
    optimizer: str = "sgd"           # sgd (Nesterov momentum) | adamw
    lr: float = bounded(0.05, gt=0, le=10)                 # peak learning rate
    momentum: float = bounded(0.9, ge=0, lt=1)            # sgd momentum
    weight_decay: float = bounded(5e-4, ge=0, le=1)       # L2 (sgd) or decoupled (adamw)
    scheduler: str = "cosine"        # none | cosine | onecycle | plateau
    warmup_epochs: float = bounded(0.0, ge=0, le=10_000)  # linear warmup, in epochs (cosine / none)
    label_smoothing: float = bounded(0.0, ge=0, le=0.3)     # epsilon of label-smoothed cross-entropy


@dataclass
class StepConfig:
    epochs: int = bounded(10, ge=1, le=10_000)     # full passes over the training split
    micro_batch_size: int = bounded(64, ge=1, le=65_536)  # samples per forward pass, per worker
    accumulation_steps: int = bounded(1, ge=1, le=4_096)  # micro-batches per optimizer step
    precision: str = "fp32"          # fp32 | bf16 | fp16 (fp16 needs CUDA)
    grad_clip: float = bounded(0.0, ge=0, le=1e6)  # max global grad norm; 0 = no clipping
    max_nonfinite_steps: int = bounded(5, ge=1, le=1_000_000)  # consecutive non-finite losses before giving up
    sync_every: int = bounded(16, ge=1, le=1_000_000)  # steps between host reads of the device (counted there)
    kernels: str = "auto"            # auto (Triton on CUDA) | triton | torch
    max_steps_per_epoch: int = bounded(0, ge=0, le=100_000_000)  # cap optimizer steps per epoch; 0 = no cap


@dataclass
class PruneConfig:
    prune_amount: float = bounded(0.0, ge=0, le=0.95)        # final sparsity of conv/linear weights
    prune_scope: str = "global"      # global | layer (L1 unstructured)
    prune_start_epoch: int = bounded(1, ge=1, le=10_000)  # first epoch after which weights are pruned
    prune_end_epoch: int = bounded(0, ge=0, le=10_000)  # last pruning epoch (spread linearly); 0 = start only


# Settings earlier versions had and wrote into checkpoints and trial configs: a config read
# back from such a folder leaves them out.  fault_dir and inject_fault (0.1.0's test seams,
# now tests/fault_plugin.py); stage_shm (it saved nothing: BENCHMARKS.md, /dev/shm staging).
RETIRED_SETTINGS = ("fault_dir", "inject_fault", "stage_shm")


@dataclass
class RunConfig:
    seed: int = bounded(0, ge=0, lt=2**32)          # seeds weights, splits, shuffles and augmentation
    device: str = "auto"             # auto | cpu | cuda
    workers: int = bounded(1, ge=1, le=1_024)      # data-parallel workers per trial
    checkpoint_every: int = bounded(1, ge=1, le=10_000)  # epochs between checkpoints
    # torch's deterministic algorithms and no cuDNN autotuning: a config trains to the same
    # numbers when run again on the same machine (some GPU kernels are slower so)
    deterministic: bool = False
    profile: bool = False            # torch.profiler over 5 steps (1 wait, 1 warmup, 3 active) of one trial
    profile_dir: str = ""            # where the trace and its table go (the service: <experiment>/profiles)
    tb_histograms: bool = False      # TensorBoard histograms of every parameter, each epoch (rank 0)
    tb_graph: bool = False           # TensorBoard graph of the model (traced once, rank 0)
    tb_dir: str = ""                 # where those go (the service: <trial folder>/model; `train`: OUT/model)


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
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        values = {k: v for k, v in values.items() if k not in RETIRED_SETTINGS}   # configs 0.1.0 wrote
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown training setting(s) {unknown}; known: {sorted(known)}")
        vals = dict(values)
        if "synthetic_shape" in vals:
            vals["synthetic_shape"] = tuple(vals["synthetic_shape"])
        return cls(**vals)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)


def branch_name(setting: str, when: tuple[tuple[str, Any], ...]) -> str:
    """The search's parameter name for `setting` drawn in branch `when` ((choice, option), ...):
    `lr[optimizer=sgd]`; a setting outside any branch keeps its own name."""
    return setting if not when else f"{setting}[{','.join(f'{k}={v}' for k, v in when)}]"


def training_settings(config: dict[str, Any]) -> dict[str, Any]:
    """A trial's config as training settings: without the branch-qualified names Ray copies
    from the searcher into the config (each value is there under its setting's own name)."""
    return {k: v for k, v in config.items() if not (k.endswith("]") and "[" in k)}


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
                          ("prune_scope", PRUNE_SCOPES), ("device", DEVICES)):
        one_of(name, allowed)
    if cfg.precision == "fp16" and not has_gpu:
        p.append("precision='fp16' needs a CUDA GPU (GradScaler and fp16 autocast); "
                 "use precision='bf16' or 'fp32' on CPU")
    if cfg.device == "cuda" and not has_gpu:
        p.append("device='cuda' but no CUDA GPU is available; use device='auto' or 'cpu'")
    for f in dataclasses.fields(cfg):
        limits = f.metadata.get("bounds")
        value = getattr(cfg, f.name)
        if limits and isinstance(value, (int, float)) and not isinstance(value, bool) and breaks(value, limits):
            p.append(f"{f.name}={value!r} must be {range_text(limits)}")
    shape = cfg.synthetic_shape
    if not (isinstance(shape, (tuple, list)) and len(shape) == 3
            and all(isinstance(n, int) and not isinstance(n, bool) for n in shape)
            and 1 <= shape[0] <= 16 and all(8 <= n <= 1024 for n in shape[1:])):
        p.append(f"synthetic_shape={shape!r} must be three whole numbers [channels, height, width]: "
                 "channels 1-16, height and width 8-1024 pixels, e.g. [3, 32, 32]")
    if cfg.warmup_epochs and cfg.warmup_epochs >= cfg.epochs:
        p.append(f"warmup_epochs={cfg.warmup_epochs!r} must be < epochs={cfg.epochs}")
    if cfg.prune_end_epoch > cfg.epochs:
        p.append(f"prune_end_epoch={cfg.prune_end_epoch} must be <= epochs={cfg.epochs}")
    if cfg.prune_amount > 0 and cfg.prune_start_epoch > cfg.epochs:
        p.append(f"prune_start_epoch={cfg.prune_start_epoch} must be <= epochs={cfg.epochs} when prune_amount > 0")
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
