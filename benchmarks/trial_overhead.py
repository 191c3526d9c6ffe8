"""Per-trial fixed cost and per-report cost: in-process trials against 2-rank DDP trials, both
ways a DDP trial can start (ranks started by the trial, the default on one node; TorchTrainer).

    .venv/bin/python benchmarks/trial_overhead.py
    RAY_TRAIN_METRICS_ENABLED=0 .venv/bin/python benchmarks/trial_overhead.py   # Train's metrics off

The same tiny trial (digits, convnet width 0.25, one optimizer step per epoch, 6 epochs)
runs 3 times in-process, 3 times as 2 gloo ranks the trial starts itself (resources.ddp
local, what `auto` picks when a node holds both ranks) and 3 times under TorchTrainer with 2
gloo workers (resources.ddp train), one trial at a time, on one local Ray.  A Tune callback stamps each trial's start, every result and
its end; the compute each epoch reports (epoch_s) is taken out, so what remains is cost:
  start   trial start -> first result, less that epoch's compute
  end     last result -> trial end
  report  mean gap between results, less the epoch's compute
  gap     last result of one trial -> first result of the next, less that epoch's compute
          (what a user waits between trials: the end, Tune's scheduling, a new actor's
          process start when one is needed, and the start)
A third run alternates the in-process trials between reservations (1 and 2 CPUs, as the
torch loader's num_workers decides), so Tune cannot reuse one actor for them.
Targets on 2 cores: in-process start+end <= 2 s; a DDP trial as the defaults
start it (ranks started by the trial) start+end <= 10 s and report <= 0.5 s.  TorchTrainer
(the path for ranks on several nodes) is printed beside it, against the same
targets.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")  # as `tuner run` sets on a local Ray
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")

import itertools

import ray
from ray import tune

from trainables.config import TrainConfig
from trainables.runtime.trainable import make_trainable

EPOCHS, TRIALS = 6, 3


class Stamps(tune.Callback):
    def __init__(self):
        self.start, self.results, self.end = {}, {}, {}

    def on_trial_start(self, iteration, trials, trial, **info):
        self.start.setdefault(trial.trial_id, time.perf_counter())

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.results.setdefault(trial.trial_id, []).append((time.perf_counter(), result.get("epoch_s", 0.0)))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.end[trial.trial_id] = time.perf_counter()


def measure(workers: int, storage: str, cache: str, vary: bool = False, ddp: str = "train") -> dict:
    """vary: the trials alternate between reservations (the torch loader with 0 and 1 loader
    processes: 1 and 2 CPUs), which Tune cannot serve from one reused actor."""
    cfg = TrainConfig(dataset="digits", cache_dir=cache, width=0.25, epochs=EPOCHS, max_steps_per_epoch=1,
                      micro_batch_size=32, flip=False, crop_padding=1, device="cpu", workers=workers,
                      loader="torch" if vary else "device").to_dict()
    if vary:
        cfg["num_workers"] = tune.grid_search([0, 1, 0])
    stamps = Stamps()
    trainable = make_trainable(workers, 1.0, 0.0, os.path.join(storage, f"train-{workers}"), ddp=ddp)
    tune.Tuner(trainable, param_space=cfg,
               tune_config=tune.TuneConfig(num_samples=1 if vary else TRIALS, max_concurrent_trials=1, reuse_actors=True),
               run_config=tune.RunConfig(name=f"overhead-{workers}-{ddp}{'-vary' if vary else ''}", storage_path=storage,
                                         verbose=0, callbacks=[stamps],
                                         checkpoint_config=tune.CheckpointConfig(num_to_keep=1))).fit()
    starts, ends, reports, gaps = [], [], [], []
    runs = sorted(stamps.results.items(), key=lambda kv: kv[1][0][0])   # one trial at a time: in order
    for i, (tid, res) in enumerate(runs):
        starts.append(res[0][0] - stamps.start[tid] - res[0][1])
        ends.append(stamps.end[tid] - res[-1][0])
        reports += [(b[0] - a[0]) - b[1] for a, b in itertools.pairwise(res)]
        if i:
            gaps.append(res[0][0] - runs[i - 1][1][-1][0] - res[0][1])
    print(f"workers={workers} ddp={ddp}: per-trial start {[round(v, 2) for v in starts]} s, end {[round(v, 2) for v in ends]} s, "
          f"between trials {[round(v, 2) for v in gaps]} s")
    return {"start_s": statistics.mean(starts), "end_s": statistics.mean(ends),
            "fixed_s": statistics.mean(starts) + statistics.mean(ends), "report_s": statistics.mean(reports),
            "gap_s": statistics.mean(gaps), "trials": len(stamps.results)}


def rows() -> dict:
    """The rows on a local Ray of their own."""
    storage, cache = tempfile.mkdtemp(prefix="tuner-overhead-"), tempfile.mkdtemp(prefix="tuner-cache-")
    env = {k: os.environ[k] for k in ("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER",
                                      "RAY_TRAIN_METRICS_ENABLED", "RAY_TRAIN_ENABLE_STATE_TRACKING") if k in os.environ}
    ray.init(address="local", num_cpus=4, include_dashboard=True, dashboard_host="127.0.0.1", log_to_driver=False,
             runtime_env={"env_vars": env})
    try:
        return {"in-process": measure(1, storage, cache),
                "in-process, reservations differ": measure(1, storage, cache, vary=True),
                "DDP x2, ranks started by the trial": measure(2, storage, cache, ddp="local"),
                "DDP x2, TorchTrainer": measure(2, storage, cache, ddp="train")}
    finally:
        ray.shutdown()


def main() -> None:
    table = rows()
    inproc, varied = table["in-process"], table["in-process, reservations differ"]
    local, ddp = table["DDP x2, ranks started by the trial"], table["DDP x2, TorchTrainer"]
    for name, r in table.items():
        print(f"  {name:34s} start {r['start_s']:6.2f} s  end {r['end_s']:6.2f} s  fixed {r['fixed_s']:6.2f} s  "
              f"per report {r['report_s']:6.3f} s  between trials {r['gap_s']:6.2f} s  ({r['trials']} trials)")
    for name, r in (("ranks started by the trial", local), ("TorchTrainer", ddp)):
        print(f"{name} / in-process: fixed {r['fixed_s'] / inproc['fixed_s']:.1f}x, "
              f"per report {r['report_s'] / max(inproc['report_s'], 1e-6):.1f}x")
    print(f"TorchTrainer / ranks started by the trial: fixed {ddp['fixed_s'] / local['fixed_s']:.1f}x")
    met = (inproc["fixed_s"] <= 2.0 and varied["fixed_s"] <= 2.0 and local["fixed_s"] <= 10.0
           and local["report_s"] <= 0.5)
    rnd = lambda r: {k: round(v, 3) for k, v in r.items()}
    print("BENCH " + json.dumps({"bench": "trial_overhead", "inprocess": rnd(inproc), "inprocess_reservations_differ": rnd(varied),
                                 "ddp_local": rnd(local), "torchtrainer": rnd(ddp),
                                 "targets": {"inprocess_fixed_s": 2.0, "ddp_fixed_s": 10.0, "ddp_report_s": 0.5},
                                 "torchtrainer_meets_ddp_targets": ddp["fixed_s"] <= 10.0 and ddp["report_s"] <= 0.5,
                                 "met": met}))


if __name__ == "__main__":
    main()
