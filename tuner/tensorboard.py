"""TensorBoard files per trial, with our own tags, written by the driver.

A subclass of Ray's TBXLoggerCallback, so Tune does not add its own (one writer per trial
folder: two would show each trial twice) while it still adds the CSV and JSON loggers that
`result.json`, `progress.csv` and the results API rely on.  The driver writes into the trial
folders of the experiment, so the files are in the storage path wherever the trial ran.
`tensorboard --logdir EXP_DIR` shows one run per trial.
"""
from __future__ import annotations

from typing import Any

from ray.tune.logger import TBXLoggerCallback

from .text import finite

# Reported metric -> TensorBoard tag.
TAGS = {
    "train_loss": "train/loss", "train_acc": "train/acc",
    "val_loss": "val/loss", "val_acc": "val/acc",
    "test_loss": "test/loss", "test_acc": "test/acc",
    "lr": "lr", "samples_per_s": "throughput/samples_per_s", "sparsity": "sparsity",
    "gpu_util": "gpu/utilization", "gpu_mem_peak_gib": "gpu/memory_peak_gib", "gpu_power_w": "gpu/power_w",
    "cuda_peak_allocated_gib": "gpu/cuda_peak_allocated_gib", "cuda_peak_reserved_gib": "gpu/cuda_peak_reserved_gib",
}


def _number(v: Any) -> float | None:
    return float(v) if finite(v) else None


def _hparam(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool)) else str(v)


class TrialTensorBoard(TBXLoggerCallback):
    """Scalars under TAGS at step = epoch; the searched settings and the final metric through
    the HParams plugin when the trial ends.  Every method Tune calls is our own: nothing of
    TBXLoggerCallback runs but its type (which tells Tune not to add its own writer)."""

    def __init__(self, searched: list[str], metric: str):
        # Not super().__init__(): it requires tensorboardX; torch's writer comes with the
        # `tensorboard` dependency.
        self.writers: dict = {}
        self.results: dict = {}
        self.searched, self.metric = list(searched), metric

    def __setstate__(self, state: dict) -> None:
        from . import _compat
        self.__dict__.update(_compat.tensorboard_state(state))

    def log_trial_start(self, trial) -> None:
        from torch.utils.tensorboard import SummaryWriter
        if trial in self.writers:
            self.writers[trial].close()
        trial.init_local_path()
        self.writers[trial] = SummaryWriter(trial.local_path, flush_secs=30)
        self.results[trial] = {}

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if trial not in self.writers:
            self.log_trial_start(trial)
        writer, step = self.writers[trial], int(result.get("epoch", iteration))
        for key, tag in TAGS.items():
            value = _number(result.get(key))
            if value is not None:
                writer.add_scalar(tag, value, global_step=step)
        writer.flush()
        self.results[trial] = result

    def log_trial_end(self, trial, failed: bool = False) -> None:
        writer = self.writers.pop(trial, None)
        result = self.results.pop(trial, {})
        if writer is None:
            return
        params = {k: _hparam(trial.config.get(k)) for k in self.searched if k in trial.config}
        final = _number(result.get(self.metric))
        if params and final is not None:
            writer.add_hparams(params, {f"hparam/{self.metric}": final, "hparam/epoch": float(result.get("epoch", 0))},
                               run_name=".")
        writer.close()
