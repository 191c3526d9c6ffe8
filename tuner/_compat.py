"""Every reach into Ray's and Optuna's internals on the service side, in one place.

Each hook names what it touches and the version it was checked against; tests/tuner/test_compat.py
runs each against the installed versions, so an upgrade that breaks one fails by the hook's
name.  Nothing else in tuner/, tests/ or benchmarks/ uses a private member of a library
(tests/tuner/test_internals.py enforces it).

Checked against: ray 2.60.0, optuna 5.x.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

CHECKED = {"ray": "2.60.0", "optuna": "5"}


# ---------------------------------------------------------------- ASHA's rung cutoff
# ray.tune.schedulers.async_hyperband: ASHAScheduler._brackets, each a _Bracket whose
# cutoff(recorded) interpolates a percentile; _Bracket._rungs lists (milestone, recorded).
# Ray has no public hook for the cutoff.  Runs now use tuner/scheduler.py (Ray's public
# TrialScheduler); experiment folders written by 0.1.0 and 0.2.0 pickled an ASHAScheduler with
# its brackets swapped for RankedBracket, so `resume` of such a folder still needs both.

from ray.tune.schedulers.async_hyperband import _Bracket


class RankedBracket(_Bracket):
    """ASHA's bracket with its rung cutoff taken by rank: a value some trial recorded there."""

    def cutoff(self, recorded):
        if not recorded:
            return None
        return np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100, method="nearest")


def rank_cutoffs(scheduler) -> None:
    """hook rank_cutoffs: ASHAScheduler._brackets' class swapped for RankedBracket."""
    for b in scheduler._brackets:
        b.__class__ = RankedBracket


def asha_milestones(scheduler) -> list[float]:
    """hook asha_milestones: the milestones of ASHA's first bracket (_Bracket._rungs)."""
    return sorted(m for m, _ in scheduler._brackets[0]._rungs)


# ---------------------------------------------------------------- a trial's saved state
# ray.tune.execution.tune_controller.TuneController._mark_trial_to_checkpoint: Tune re-writes a
# trial's entry in the experiment state only when marked; stop_trial marks trials that have an
# actor, not a paused one, so a paused trial a scheduler ends would be saved as PAUSED.
# Schedulers get the controller wrapped in TrialRunnerWrapper (its _tune_controller).

def mark_trial_state(tune_controller, trial) -> None:
    """hook mark_trial_state: the trial's entry in Tune's experiment state re-written at the
    next save."""
    getattr(tune_controller, "_tune_controller", tune_controller)._mark_trial_to_checkpoint(trial)


# ---------------------------------------------------------------- Tune's result files
# ray.tune.logger.logger.LoggerCallback._restore_from_remote: on every trial start, a trial
# with a checkpoint gets result.json / progress.csv copied from the storage path over the
# driver's staging copy.  A paused trial resumed in the same run (promotion ASHA) has its
# newest rows only in the staging copy (storage gets them at the next sync), so the copy from
# storage wiped the rows of the epochs before the pause.  Only a driver without a staging
# copy (`tuner resume`, a new process) needs the one from storage.

from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback


class _KeepStaged:
    def _restore_from_remote(self, file_name: str, trial) -> None:
        if Path(trial.local_path, file_name).exists():
            return
        super()._restore_from_remote(file_name, trial)  # type: ignore[misc]


class KeptJsonLogger(_KeepStaged, JsonLoggerCallback):
    """Tune's result.json writer, keeping this driver's rows when a trial resumes."""


class KeptCsvLogger(_KeepStaged, CSVLoggerCallback):
    """Tune's progress.csv writer, keeping this driver's rows when a trial resumes."""


def result_loggers() -> list:
    """hook result_loggers: Tune's result.json and progress.csv callbacks (they take the place
    of Tune's own) with the staged rows kept across a pause."""
    return [KeptJsonLogger(), KeptCsvLogger()]


# ---------------------------------------------------------------- Ray Train's state actor
# ray.train.v2._internal.state.state_actor.get_or_create_state_actor: the actor the
# dashboard's Train view reads; no public way to start it before the first run.

def train_state_actor():
    """hook train_state_actor: Ray Train V2's state actor, started if it is not running."""
    from ray.train.v2._internal.state.state_actor import get_or_create_state_actor
    return get_or_create_state_actor()


# ---------------------------------------------------------------- Tuner.restore
# ray.tune.Tuner._local_tuner._tune_config.search_alg: the searcher Tuner.restore unpickled,
# before fit() restores its state; Ray has no public accessor, and no argument of
# Tuner.restore reaches the searcher.

def restored_searcher(tuner):
    """hook restored_searcher: the search algorithm inside a restored Tuner."""
    return tuner._local_tuner._tune_config.search_alg


def restored_scheduler(tuner):
    """hook restored_scheduler: the trial scheduler inside a restored Tuner (same path)."""
    return tuner._local_tuner._tune_config.scheduler


# ---------------------------------------------------------------- PED-ANOVA's top set
# optuna.importance._ped_anova.evaluator._QuantileFilter: the trials PED-ANOVA's evaluator takes
# as its top set for a target quantile (ties included).  Optuna has no public way to ask; the
# report states the size so that a reader sees what the importance rests on.

def pedanova_top(values: list[float], quantile: float, lower_is_better: bool) -> int:
    """hook pedanova_top: how many of `values` PED-ANOVA's top set holds at `quantile`."""
    import optuna
    from optuna.importance._ped_anova.evaluator import _QuantileFilter
    trials = [optuna.trial.create_trial(value=float(v)) for v in values]
    return len(_QuantileFilter(quantile, lower_is_better, None).filter(trials))


# ---------------------------------------------------------------- Ray's own helpers (tests)

def validate_cluster_config(cfg: dict) -> None:
    """hook validate_cluster_config: ray.autoscaler._private.util prepare_config then
    validate_config, what `ray up` runs on a cluster file before launching."""
    from ray.autoscaler._private.util import prepare_config, validate_config
    validate_config(prepare_config(cfg))


def ray_address_file() -> str:
    """hook ray_address_file: ray._private.utils.get_ray_address_file, where a local Ray
    records itself as the cluster Ray's state API joins when given no address."""
    from ray._private.utils import get_ray_address_file
    return get_ray_address_file(None)


def driver_kv_back() -> None:
    """hook driver_kv_back: ray.experimental.internal_kv.global_gcs_client pointed back at this
    driver's own GCS client (ray._private.worker.global_worker.gcs_client).  Every
    ray._private.node.Node made in a process (a ray.cluster_utils.Cluster's nodes) replaces that
    process-global client with one to its own GCS; once that cluster is gone, the driver's next
    use of the internal KV (exporting a new remote function, Tune in the process) waits on a
    dead GCS and Ray ends the process after 60 s ("GCS has been unavailable")."""
    import ray.experimental.internal_kv as kv
    from ray._private.worker import global_worker
    if global_worker.connected:
        kv._initialize_internal_kv(global_worker.gcs_client)


# ---------------------------------------------------------------- folders written by 0.1.0
# Version 0.1.0 pickled, into tuner.pkl and searcher-state-*.pkl: tuner.run.trial_folder_name,
# tuner.searcher.FidelityOptunaSearch (a subclass of Ray's OptunaSearch, its state Ray's
# private fields), tuner.searcher.RankedBracket and InterleavedTPESampler, and the Console
# and TrialTensorBoard callbacks with underscored fields.  These aliases and state
# conversions let `resume` (and anything else that unpickles) read such folders.

def install_old_names() -> None:
    """Module attributes under the names 0.1.0 pickled (explicit, only when a folder is loaded)."""
    import optuna

    from tuner import run, searcher, tuning
    setattr(run, "trial_folder_name", tuning.trial_folder_name)   # noqa: B010 - names these modules no longer have
    setattr(searcher, "FidelityOptunaSearch", searcher.FidelitySearcher)   # noqa: B010
    setattr(searcher, "RankedBracket", RankedBracket)   # noqa: B010
    setattr(searcher, "InterleavedTPESampler", optuna.samplers.TPESampler)   # noqa: B010


def searcher_state(state: dict[str, Any]) -> dict[str, Any]:
    """A FidelitySearcher's state; one written by 0.1.0 (Ray OptunaSearch's fields: _ot_trials,
    _completed_trials, _study_name, _storage, _space, _sampler) converted."""
    if "_ot_trials" not in state:
        return state
    out = {k: v for k, v in state.items() if not k.startswith("_") or k in ("_metric", "_mode")}
    out.update(space=state.get("_space"), sampler=state.get("_sampler"),
               study_name=state.get("_study_name", "tuner"),
               numbers={tid: t.number for tid, t in state["_ot_trials"].items()},
               completed=set(state.get("_completed_trials", ())),
               journal="optuna-journal.log" if state.get("_storage") is not None else None,
               experiment_dir=None)
    for k, default in (("rung_seen", {}), ("unjudged", {}), ("last_results", {}), ("reported", {}),
                       ("rungs", ()), ("eta", 3), ("journal_upload", None)):
        out.setdefault(k, default)
    return out


def console_state(state: dict[str, Any]) -> dict[str, Any]:
    """The console's state; 0.1.0's underscored fields renamed."""
    renames = {"_stream": "stream_given", "_tty": "tty_given", "_drawn": "drawn", "_last_draw": "last_draw"}
    return {renames.get(k, k): v for k, v in state.items()}


def tensorboard_state(state: dict[str, Any]) -> dict[str, Any]:
    """TrialTensorBoard's state; 0.1.0 kept Ray TBXLoggerCallback's own fields (_trial_writer,
    _trial_result, _summary_writer_cls): its writers are not carried over (closed with the run)."""
    out = {k: v for k, v in state.items() if not k.startswith("_")}
    out.setdefault("writers", {})
    out.setdefault("results", {})
    return out

