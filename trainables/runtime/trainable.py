"""The Tune trainable: for one worker, train_loop in the trial itself; for two or more, ranks
the trial starts on its own node (trainables/runtime/ranks.py, when they fit one node) or a Ray Train
TorchTrainer (ranks on any nodes).  All of them report the same metrics and checkpoints."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from trainables.config import training_settings

# A Tune trial whose work runs on Train workers still needs a (tiny) resource of its own.
DRIVER_CPU = 0.01
# Checkpoints a trial (Tune) or Train run keeps: this many best by the experiment's metric,
# and always the latest.  Ray ranks by score only, so "the latest two" is not expressible;
# the best ones are the earlier checkpoints a corrupt latest one falls back to.
KEEP_BEST = 2
# A trial asks for this much of a node's `accelerator_type:<X>` resource (Ray gives each node
# 1 of its GPU type): enough to land on such a node, never a limit on how many trials fit.
ACCELERATOR_SHARE = 0.001


def worker_cpus(config: dict[str, Any], cpus_per_worker: float) -> float:
    """CPUs one worker of this config keeps busy: with the torch loader, its training process
    plus `num_workers` DataLoader processes; never less than cpus_per_worker."""
    if config.get("loader") == "torch":
        return max(cpus_per_worker, 1.0 + int(config.get("num_workers") or 0))
    return cpus_per_worker


def worker_resources(config: dict[str, Any], cpus_per_worker: float, gpus_per_worker: float,
                     accelerator: str = "") -> dict[str, float]:
    """What one worker (the trial itself for 1 worker, one Train worker for DDP) reserves."""
    out = {"CPU": worker_cpus(config, cpus_per_worker)}
    if gpus_per_worker > 0:
        out["GPU"] = gpus_per_worker
    if accelerator:
        out[f"accelerator_type:{accelerator}"] = ACCELERATOR_SHARE
    return out


def trial_resources(workers: int, cpus_per_worker: float, gpus_per_worker: float,
                    config: dict[str, Any] | None = None, accelerator: str = "") -> dict[str, float]:
    """What one trial of this config takes from the cluster, in Ray's resource names, when its
    ranks (two or more) run on Ray Train: theirs, plus the trial's own small share."""
    total = local_resources(workers, cpus_per_worker, gpus_per_worker, config, accelerator)
    if workers > 1:
        total["CPU"] += DRIVER_CPU
    return total


def local_resources(workers: int, cpus_per_worker: float, gpus_per_worker: float,
                    config: dict[str, Any] | None = None, accelerator: str = "") -> dict[str, float]:
    """What a trial whose ranks run in its own process(es) reserves: every rank's share, in one
    bundle (one node; the trial's process gets all of its GPUs and passes one to each rank)."""
    one = worker_resources(config or {}, cpus_per_worker, gpus_per_worker, accelerator)
    return {k: v * workers for k, v in one.items()}


def make_trainable(workers: int, cpus_per_worker: float, gpus_per_worker: float, train_storage: str,
                   controller_failure_limit: int = 2, worker_failures: int = 1,
                   keep_by: tuple[str, str] = ("val_acc", "max"), accelerator: str = "",
                   placement_strategy: str = "PACK", ddp: str = "train") -> Callable:
    """A Tune function trainable whose reservation follows each trial's config (see
    worker_resources).  ddp "local": the ranks are processes of the trial, restarted up to
    worker_failures times; "train": a TorchTrainer, whose run keeps its KEEP_BEST best
    checkpoints by keep_by (metric, mode) and its latest."""
    from ray import tune
    from ray.tune.execution.placement_groups import PlacementGroupFactory

    if workers <= 1 or ddp == "local":
        world = max(workers, 1)

        def trainable(config: dict[str, Any]) -> None:
            from trainables.runtime.preflight import trial_node_check
            from trainables.runtime.session import TuneSession
            trial_node_check()   # this node, which may have joined after the run's preflight
            settings = with_model_board(training_settings(config))
            if world == 1:   # one worker: train in the trial's own process
                from trainables.loop import train_loop
                train_loop(settings, TuneSession(settings.get("device", "auto")))
                return
            from trainables.runtime.ranks import rank_threads, run_ranks
            job = {"config": settings, "device": settings.get("device", "auto"),
                   "threads": rank_threads(worker_cpus(settings, cpus_per_worker))}
            run_ranks(world, job, TuneSession(device=None), restarts=worker_failures if world > 1 else 0)
        return tune.with_resources(trainable, lambda config: PlacementGroupFactory(
            [local_resources(world, cpus_per_worker, gpus_per_worker, config, accelerator)]))

    def trainable(config: dict[str, Any]) -> None:  # type: ignore[no-redef]  # one of two by branch: Tune keys on the name
        _fit_ddp(with_model_board(training_settings(config)), workers, cpus_per_worker, gpus_per_worker, train_storage,
                 controller_failure_limit, worker_failures, keep_by, accelerator, placement_strategy)
    return tune.with_resources(trainable, {"cpu": DRIVER_CPU})


def with_model_board(config: dict[str, Any]) -> dict[str, Any]:
    """The model's TensorBoard views (when asked for) go into the trial folder's `model`
    subfolder: Tune syncs the trial folder's files to the experiment folder."""
    if (config.get("tb_histograms") or config.get("tb_graph")) and not config.get("tb_dir"):
        from ray import tune
        config["tb_dir"] = os.path.join(tune.get_context().get_trial_dir(), "model")
    return config


def _train_worker(config: dict[str, Any]) -> None:
    # Imported here: the Tune trial process that only drives TorchTrainer never loads torch.
    from trainables.loop import train_loop
    from trainables.runtime.preflight import trial_node_check
    from trainables.runtime.session import TrainSession
    trial_node_check()
    train_loop(config, TrainSession(config.get("device", "auto")))


def _fit_ddp(config: dict[str, Any], workers: int, cpus: float, gpus: float, storage: str,
             controller_failure_limit: int, worker_failures: int, keep_by: tuple[str, str],
             accelerator: str = "", placement_strategy: str = "PACK") -> None:
    import ray.train
    from ray import tune
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    use_gpu = gpus > 0
    resources = worker_resources(config, cpus, gpus, accelerator)
    # The run name comes from the trial id, so a retried or resumed trial finds its own
    # Train run (and its latest checkpoint) again.
    name = f"train-{tune.get_context().get_trial_id()}"
    trainer = TorchTrainer(
        _train_worker, train_loop_config=config,
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        scaling_config=ray.train.ScalingConfig(num_workers=workers, use_gpu=use_gpu, resources_per_worker=resources,
                                              placement_strategy=placement_strategy),
        run_config=ray.train.RunConfig(
            name=name, storage_path=storage, callbacks=[TuneReportCallback()],
            # Train keeps every checkpoint unless told.
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=KEEP_BEST, checkpoint_score_attribute=keep_by[0],
                                                         checkpoint_score_order=keep_by[1]),
            failure_config=ray.train.FailureConfig(max_failures=worker_failures,
                                                   controller_failure_limit=controller_failure_limit)),
    )
    trainer.fit()
