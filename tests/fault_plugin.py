"""The test plugin trials load (trainables/runtime/plugin.py): it acts at known points of a trial.

Named by a test as TUNER_TEST_PLUGIN="<this file>::<json>" (see `env()`), the JSON holding:
  dir      a folder: each rank writes rank<r>.pid there as it starts (the process training as
           rank r now), and while dir/hold names an epoch <= the next one, the rank waits
  inject   nan_loss | oom | oom_rank1: the loss is NaN from the first step, or the step
           raises CUDA's out-of-memory error (oom_rank1: on rank 1 only)
  when     {setting: value}: inject only in trials whose config has these values
"""
import json
import os
import time
from pathlib import Path

FILE = str(Path(__file__).resolve())
conf: dict = {}


def env(dir=None, inject="", when=None) -> dict[str, str]:
    """The environment variable that makes a run's trials load this plugin."""
    arg = json.dumps({"dir": str(dir) if dir else "", "inject": inject, "when": when or {}})
    return {"TUNER_TEST_PLUGIN": f"{FILE}::{arg}"}


def setup(argument: str) -> None:
    conf.update(json.loads(argument or "{}"))


def on_rank_start(rank: int) -> None:
    if conf.get("dir"):
        folder = Path(conf["dir"])
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".rank{rank}.pid.{os.getpid()}"
        tmp.write_text(str(os.getpid()))
        os.replace(tmp, folder / f"rank{rank}.pid")


def before_epoch(rank: int, epoch: int) -> None:
    if not conf.get("dir"):
        return
    hold = Path(conf["dir"]) / "hold"
    while True:
        try:
            if int(hold.read_text().strip() or 0) > epoch:
                return
        except (FileNotFoundError, ValueError):
            return
        time.sleep(0.05)


def wrap_loss(loss_fn, config: dict, rank: int):
    fault = conf.get("inject", "")
    if not fault or any(config.get(k) != v for k, v in conf.get("when", {}).items()):
        return loss_fn
    if fault == "nan_loss":
        return lambda logits, y: loss_fn(logits, y) * float("nan")
    if fault == "oom" or (fault == "oom_rank1" and rank == 1):
        import torch

        def oom(logits, y):
            raise torch.OutOfMemoryError(f"injected fault: CUDA out of memory (inject={fault})")
        return oom
    return loss_fn
