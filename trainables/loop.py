"""train_loop(config, session): one trial's training, with or without Ray.

Builds data, model, optimizer and LR schedule, runs the epochs, validates, prunes,
checkpoints and reports through the session.  A trial that diverges or runs out of
memory ends itself with a final report (Ray would retry any exception it raised).
"""
from __future__ import annotations

import gc
import inspect
import logging
import math
import shutil
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainables.config import TrainConfig, check
from trainables.data.loaders import DeviceLoader, set_epoch, torch_loader
from trainables.data.sources import load_data
from trainables.observe import profiling
from trainables.observe.gpu_monitor import GpuMonitor
from trainables.observe.model_board import ModelBoard
from trainables.runtime import checkpoint as ckpt_io
from trainables.runtime import plugin
from trainables.runtime.session import PlainSession, Session, local_folder
from trainables.training import kernels, pruning
from trainables.training.models import build_model
from trainables.training.optim import build_optimizer, build_scheduler, make_loss
from trainables.training.step import DTYPES, DivergedError, TrainStep

log = logging.getLogger(__name__)

WORST_LOSS = 1.0e6  # finite stand-in for a loss that could not be measured
# torch 2.14 renames DDP's broadcast_buffers (and warns); older releases know only the old name.
NO_FORWARD_BUFFER_SYNC = ({"forward_sync_buffers": False}
                          if "forward_sync_buffers" in inspect.signature(nn.parallel.DistributedDataParallel).parameters
                          else {"broadcast_buffers": False})


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (disk full, I/O error): the trial ends, nothing is lost."""


def _all_reduce(values: list[float], device: torch.device) -> list[float]:
    if not (dist.is_available() and dist.is_initialized()):
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def _sync_buffers(model: nn.Module) -> None:
    """Rank 0's buffers (BatchNorm running statistics) on every rank."""
    if dist.is_available() and dist.is_initialized():
        for b in model.buffers():
            dist.broadcast(b, src=0)


@torch.inference_mode()
def evaluate(model: nn.Module, loader, step: TrainStep) -> tuple[float, float]:
    """Mean loss and accuracy over the loader's samples on all ranks (summed, then divided)."""
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=step.device)
    correct = torch.zeros((), dtype=torch.float64, device=step.device)
    count = 0
    for x, y in loader:
        x, y = step.to_device(x), step.to_device(y)
        with step.autocast():
            logits = model(x)
        loss_sum += kernels.cross_entropy_torch(logits, y) * y.shape[0]
        correct += (logits.argmax(1) == y).sum()
        count += y.shape[0]
    total_loss, total_correct, total = _all_reduce([float(loss_sum), float(correct), float(count)], step.device)
    return total_loss / max(total, 1), total_correct / max(total, 1)


def deterministic() -> None:
    """torch's deterministic algorithms (a warning, not an error, for an op that has none) and no
    cuDNN autotuning.  cuBLAS is deterministic only with CUBLAS_WORKSPACE_CONFIG=:4096:8 in the
    trial's environment (docs/search.md, "Reproducible runs"); without it torch warns."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False


class _Trial:
    """The state of one training run; split from train_loop to keep each piece short."""

    def __init__(self, cfg: TrainConfig, session: Session):
        self.cfg, self.session = cfg, session
        self.device = session.device
        check(cfg, self.device.type)
        if cfg.deterministic:
            deterministic()
        torch.manual_seed(cfg.seed)  # same initial weights on every rank
        self.data = load_data(cfg, cfg.seed)
        self.impl = kernels.resolve(cfg.kernels, self.device)
        model = build_model(cfg, self.data.in_channels, self.data.num_classes).to(self.device)
        if cfg.channels_last and self.device.type == "cuda":
            model = model.to(memory_format=torch.channels_last)
        self.model = model  # the bare module: checkpoints, pruning and validation use it
        self.train_loader, self.val_loader, self.test_loader = self._loaders()
        steps = len(self.train_loader) // cfg.accumulation_steps + bool(len(self.train_loader) % cfg.accumulation_steps)
        self.steps_per_epoch = min(steps, cfg.max_steps_per_epoch) if cfg.max_steps_per_epoch else steps
        self.optimizer = build_optimizer(cfg, model)
        self.scheduler = build_scheduler(cfg, self.optimizer, self.steps_per_epoch)
        self.wrapped = self._wrap(model)
        self.step = TrainStep(self.wrapped, self.optimizer, loss_fn=plugin.wrap_loss(make_loss(cfg, self.impl), cfg.to_dict(), session.rank), device=self.device,
                              precision=cfg.precision, grad_clip=cfg.grad_clip,
                              max_nonfinite_steps=cfg.max_nonfinite_steps, channels_last=cfg.channels_last,
                              sync_every=cfg.sync_every)
        self.start_epoch, self.global_step, self.epoch = 1, 0, 1
        self.best_val_acc = 0.0
        self.profiler = profiling.maybe_profiler(cfg.profile, cfg.profile_dir, session.rank, self.device)
        self.monitor = GpuMonitor(self.device)
        self.board = ModelBoard(cfg, model, self._sample(), session.rank)
        # Reported with every epoch: where this run of the trial started from.
        self.resumed = {"resumed_from_epoch": 0, "restored_weights_sha256": ""}

    def _sample(self) -> torch.Tensor | None:
        """One validation batch's inputs on the device (for tracing the graph), when asked for."""
        if not (self.cfg.tb_graph and self.cfg.tb_dir and self.session.rank == 0):
            return None
        x, _ = next(iter(self.val_loader))
        return self.step.to_device(x).float()   # traced without autocast: fp32 like the weights

    def _wrap(self, model: nn.Module) -> nn.Module:
        if self.session.world_size > 1 and dist.is_available() and dist.is_initialized():
            ids = [self.device.index] if self.device.type == "cuda" else None
            # No buffer broadcast in every forward: that collective would leave the other ranks
            # waiting when one rank runs out of memory mid-group (TrainStep agrees once per step).
            # Buffers (BatchNorm statistics) are synced from rank 0 before each validation.
            return nn.parallel.DistributedDataParallel(model, device_ids=ids, **NO_FORWARD_BUFFER_SYNC)
        return model

    def _loaders(self):
        cfg, s, d = self.cfg, self.session, self.data
        out_dtype = DTYPES[cfg.precision] or torch.float32
        def make(split, train):
            if cfg.loader == "device":
                scale, shift = d.scale_shift
                return DeviceLoader(split, batch_size=cfg.micro_batch_size, device=self.device, scale=scale,
                                    shift=shift, out_dtype=out_dtype, train=train, augment=cfg.augment,
                                    padding=cfg.crop_padding, flip=cfg.flip, seed=cfg.seed, rank=s.rank,
                                    world=s.world_size, drop_last=cfg.drop_last, impl=self.impl)
            return torch_loader(cfg, d, split, batch_size=cfg.micro_batch_size, train=train, seed=cfg.seed,
                                rank=s.rank, world=s.world_size)
        return make(d.train, True), make(d.val, False), (make(d.test, False) if cfg.eval_test else None)

    # ------------------------------------------------------------ checkpoints

    def restore(self, folder: str) -> None:
        payload = ckpt_io.load(folder, map_location=self.device)
        pruning.restore_masks(self.model, payload["model"])
        self.model.load_state_dict(payload["model"])
        restored = ckpt_io.weights_sha256(self.model.state_dict())
        if payload.get("weights_sha256") and restored != payload["weights_sha256"]:
            raise ckpt_io.CheckpointError(f"{folder}: the restored weights differ from the ones saved")
        self.optimizer.load_state_dict(payload["optimizer"])
        if self.scheduler is not None and payload.get("scheduler"):
            self.scheduler.load_state_dict(payload["scheduler"])
        if self.step.scaler is not None and payload.get("scaler"):
            self.step.scaler.load_state_dict(payload["scaler"])
        ckpt_io.set_rng_state(payload["rng"])
        self.start_epoch = int(payload["epoch"]) + 1
        self.global_step = int(payload["step"])
        self.best_val_acc = float(payload.get("metrics", {}).get("best_val_acc", 0.0))
        self.resumed = {"resumed_from_epoch": int(payload["epoch"]), "restored_weights_sha256": restored}
        log.info("resumed from %s at epoch %d", folder, self.start_epoch)

    def save(self, folder: str, epoch: int, metrics: dict[str, Any]) -> None:
        weights = self.model.state_dict()
        ckpt_io.save(f"{folder}/{ckpt_io.FILENAME}", {
            "model": weights,
            "weights_sha256": ckpt_io.weights_sha256(weights),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.step.scaler.state_dict() if self.step.scaler is not None else None,
            "epoch": epoch, "step": self.global_step, "rng": ckpt_io.rng_state(),
            "config": self.cfg.to_dict(), "metrics": dict(metrics),
            "model_info": {"in_channels": self.data.in_channels, "num_classes": self.data.num_classes,
                           "mean": self.data.mean.tolist(), "std": self.data.std.tolist()},
        })

    # ------------------------------------------------------------ epochs

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        """One pass; the host reads the device every `sync_every` steps (inside TrainStep) and
        once at the end."""
        cfg = self.cfg
        self.wrapped.train()
        set_epoch(self.train_loader, epoch)
        steps = 0
        self.monitor.restart()
        t0 = time.perf_counter()
        group = []
        batches = iter(self.train_loader)
        while steps < self.steps_per_epoch:
            batch = next(batches, None)
            if batch is not None:
                group.append(batch)
            if group and (len(group) == cfg.accumulation_steps or batch is None):
                self.step(group)
                if self.profiler is not None:
                    self.profiler.step()
                group, steps = [], steps + 1
                self.global_step += 1
                if self.scheduler is not None and not isinstance(
                        self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                    self.scheduler.step()
            if batch is None:
                break
        t = self.step.epoch_totals()   # waits for the device: the epoch's time is complete
        dt = time.perf_counter() - t0
        loss_sum, correct, counted, samples, norm_sum, applied = _all_reduce(
            [t["loss_sum"], t["correct"], t["counted"], t["samples"], t["norm_sum"], t["applied"]], self.device)
        return {"train_loss": loss_sum / max(counted, 1), "train_acc": correct / max(counted, 1),
                "samples_per_s": samples / dt if dt > 0 else 0.0, "train_s": dt,
                "grad_norm": norm_sum / applied if applied else float("nan"), **self.monitor.epoch_metrics()}

    def epoch_metrics(self, epoch: int, t0: float) -> dict[str, Any]:
        self.epoch = epoch
        m = self.train_epoch(epoch)
        target = pruning.target_sparsity(self.cfg, epoch)
        if target > 0:
            pruning.prune_to(self.model, target, self.cfg.prune_scope)
        self.board.epoch(self.model, epoch)
        _sync_buffers(self.model)
        val_loss, val_acc = evaluate(self.model, self.val_loader, self.step)
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.scheduler.step(val_loss)
        self.best_val_acc = max(self.best_val_acc, val_acc)
        m.update(epoch=epoch, status="ok", val_loss=val_loss, val_acc=val_acc, best_val_acc=self.best_val_acc,
                 lr=self.optimizer.param_groups[0]["lr"], sparsity=pruning.sparsity(self.model),
                 nonfinite_steps=self.step.nonfinite_total, global_batch_size=self.cfg.global_batch_size,
                 **self.resumed)
        if self.test_loader is not None:
            m["test_loss"], m["test_acc"] = evaluate(self.model, self.test_loader, self.step)
        if not math.isfinite(m["grad_norm"]):
            m["grad_norm"] = 0.0
        m["epoch_s"] = time.perf_counter() - t0
        return m

    def report(self, metrics: dict[str, Any], epoch: int, with_checkpoint: bool) -> None:
        if not with_checkpoint:
            self.session.report(metrics)
            return
        folder, error = None, None
        try:
            if self.session.rank == 0:
                try:
                    folder = tempfile.mkdtemp(prefix="tuner-ckpt-")
                    self.save(folder, epoch, metrics)
                except OSError as e:  # a full or failing disk: the previous checkpoint stays as it was
                    error = e
            # Every rank learns that rank 0 could not write, so none goes on alone.
            if _all_reduce([float(error is not None)], self.device)[0]:
                raise CheckpointWriteError(f"the checkpoint of epoch {epoch} could not be written"
                                           + (f": {error}" if error else " on rank 0"))
            self.session.report(metrics, checkpoint_dir=folder if self.session.rank == 0 else None)
        finally:
            if folder:
                shutil.rmtree(folder, ignore_errors=True)

    def run(self) -> dict[str, Any]:
        last: dict[str, Any] = {}
        plugin.on_rank_start(self.session.rank)
        try:
            for epoch in range(self.start_epoch, self.cfg.epochs + 1):
                plugin.before_epoch(self.session.rank, epoch)
                last = self.epoch_metrics(epoch, time.perf_counter())
                keep = epoch % self.cfg.checkpoint_every == 0 or epoch == self.cfg.epochs
                log.info("epoch %d/%d val_acc=%.4f val_loss=%.4f train_loss=%.4f %.0f samples/s", epoch,
                         self.cfg.epochs, last["val_acc"], last["val_loss"], last["train_loss"],
                         last["samples_per_s"])
                self.report(last, epoch, keep)
        finally:
            self.monitor.close()
            self.board.close()
            if self.profiler is not None:
                self.profiler.close()
        return last


def restore_newest_good(trial: _Trial, folders: list) -> str:
    """Restore the first checkpoint of `folders` (newest first) that reads back intact; the one
    used.  Each is a local folder or a Ray checkpoint on cloud storage, fetched only when its
    turn comes.  A corrupt latest checkpoint falls back to the previous kept one; none intact
    is one clear CheckpointError naming each."""
    problems = []
    for item in folders:
        try:
            folder = item if isinstance(item, str) else local_folder(item) or ""
        except OSError as e:   # the storage could not be read: the next older one may be
            problems.append(f"{item.path} could not be fetched ({e})")
            continue
        try:
            trial.restore(folder)
        except ckpt_io.CheckpointError as e:
            problems.append(str(e))
            continue
        if problems:
            log.warning("resumed from an earlier checkpoint %s; newer ones are corrupt: %s", folder,
                        "; ".join(problems))
        return folder
    raise ckpt_io.CheckpointError("no intact checkpoint to resume from: " + "; ".join(problems))


def agree_on_start(trial: _Trial) -> None:
    """Every rank resumed from the same epoch, or none goes on: ranks at different epochs would
    run different collectives and wait on each other for ever."""
    world = trial.session.world_size
    if world <= 1:
        return
    total, squares = _all_reduce([float(trial.start_epoch), float(trial.start_epoch) ** 2], trial.device)
    if squares * world != total * total:
        raise ckpt_io.CheckpointError(f"the ranks resumed from different checkpoints (rank {trial.session.rank} "
                                      f"at epoch {trial.start_epoch}); check the run's checkpoint folders")


def final_report(session: Session, status: str, epoch: int, reason: str) -> dict[str, Any]:
    """The last report of a trial that cannot go on: finite worst values, never NaN."""
    metrics = {"epoch": epoch, "status": status, "reason": reason, "train_loss": WORST_LOSS,
               "val_loss": WORST_LOSS, "val_acc": 0.0, "best_val_acc": 0.0, "train_acc": 0.0,
               "lr": 0.0, "samples_per_s": 0.0, "epoch_s": 0.0, "sparsity": 0.0, "grad_norm": 0.0}
    session.report(metrics)
    return metrics


def train_loop(config: TrainConfig | dict, session: Session | None = None) -> dict[str, Any]:
    """Train one config to the end, or until it diverges or runs out of memory.

    Returns the last metrics reported.  Never raises for divergence, OOM or a checkpoint
    that cannot be written: those end the trial with status "diverged" / "infeasible" /
    "storage_error".
    """
    cfg = config if isinstance(config, TrainConfig) else TrainConfig.from_dict(config)
    session = session or PlainSession(cfg.device)
    trial = None
    try:
        trial = _Trial(cfg, session)
        resume = session.get_checkpoint()
        if resume:
            restore_newest_good(trial, [resume, *session.earlier_checkpoints()])
            agree_on_start(trial)
        return trial.run()
    except DivergedError as e:
        epoch = _current_epoch(trial)
        log.warning("trial diverged at epoch %d: %s", epoch, e)
        return final_report(session, "diverged", epoch, str(e))
    except CheckpointWriteError as e:
        epoch = _current_epoch(trial)
        log.warning("trial stopped at epoch %d: %s", epoch, e)
        return final_report(session, "storage_error", epoch, str(e))
    except torch.OutOfMemoryError as e:
        epoch = _current_epoch(trial)
        trial = None  # drop the model, optimizer and batches before freeing the cache
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        log.warning("trial ran out of memory at epoch %d", epoch)
        return final_report(session, "infeasible", epoch, f"out of memory: {str(e).splitlines()[0][:200]}")


def _current_epoch(trial: _Trial | None) -> int:
    return trial.epoch if trial is not None else 1
