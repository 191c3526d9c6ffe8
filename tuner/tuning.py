"""Building the Tuner: the trainable, the searcher, ASHA, the console and TensorBoard callbacks."""
from __future__ import annotations

from trainables.runtime import storage
from trainables.runtime.trainable import KEEP_BEST, make_trainable
from tuner.schema import Experiment


def build_tuner(exp: Experiment, concurrency: int, verbose: bool = False, warm: list | None = None):
    """`warm`: an earlier experiment's study trials (tuner/warmstart.py), told to the study first."""
    from ray import tune

    from . import _compat
    from .scheduler import RUNG_FILE
    from .searcher import JOURNAL, FixedSearcher, make_searcher
    from .share import from_env
    from .space import param_space
    from .tensorboard import TrialTensorBoard
    multi = exp.second_objective is not None
    # One objective: Tune gets metric/mode for the scheduler (and its trial table).  Two: the
    # searcher gets both, ASHA stops on the first.  The searcher holds the space and its
    # objectives itself (define-by-run); Tune's param_space has the fixed settings only.
    exp.exp_dir.mkdir(parents=True, exist_ok=True)
    journal = exp.exp_dir / JOURNAL
    # Nothing searched: the trials repeat the fixed settings (Tune's own generator; Optuna
    # would have no space to sample).
    searcher = make_searcher(exp.search, exp.metrics if multi else exp.metric, exp.modes if multi else exp.mode,
                             exp.seed, exp.budget, journal=journal, study_name=exp.name,
                             warm=bool(warm)) if exp.search else None
    if searcher is not None:
        for t in warm or []:
            searcher.study.add_trial(t)
    if searcher is not None and exp.remote:
        # Tune uploads the searcher's snapshot folder: the journal goes with it.
        searcher.journal_upload = str(journal)
    promotion = exp.budget.asha == "promotion"
    share = from_env(concurrency)   # under the service: its fair share caps the slots
    if searcher is None and (promotion or share):   # slots that paused trials do not hold (see SlotSearcher)
        searcher = FixedSearcher(exp.metrics if multi else exp.metric, exp.modes if multi else exp.mode)
    if searcher is not None:
        searcher.share = share
    scheduler = asha(exp.budget, exp.metric if multi else None, exp.mode if multi else None,
                     records=exp.exp_dir / RUNG_FILE)
    return tune.Tuner(
        trainable_for(exp),
        param_space=param_space(exp),
        tune_config=tune.TuneConfig(metric=None if multi else exp.metric, mode=None if multi else exp.mode,
                                    search_alg=searcher, scheduler=scheduler, num_samples=exp.budget.num_samples,
                                    max_concurrent_trials=concurrency, time_budget_s=exp.budget.time_limit_s,
                                    reuse_actors=reuse_actors(exp, share is not None), trial_dirname_creator=trial_folder_name),
        run_config=tune.RunConfig(
            name=exp.name, storage_path=exp.storage_path if exp.remote else str(exp.exp_dir.parent),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=KEEP_BEST, checkpoint_score_attribute=exp.metric,
                                                    checkpoint_score_order=exp.mode),  # best two + latest
            failure_config=tune.FailureConfig(max_failures=exp.resources.max_failures),
            verbose=1 if verbose else 0,
            # Files a trial writes in its folder (the model's TensorBoard views) reach the
            # experiment folder from whichever node ran it.
            sync_config=tune.SyncConfig(sync_artifacts=True),
            callbacks=[TrialTensorBoard([p.name for p in exp.searched], exp.metric), console_for(exp),
                       *_compat.result_loggers()]),
    )




def asha(budget, metric: str | None = None, mode: str | None = None, cutoff: str = "ranked",
         records=None, promotion: bool | None = None):
    """The scheduler every search runs under: ASHA over the budget's rungs, of the budget's kind
    (`budget.asha`, or `promotion` when given).  When stopping, a trial goes on past a rung if it
    is not below the top 1/eta of the trials recorded there before it, the cutoff taken by rank
    (numpy's "nearest" percentile): Ray's ASHAScheduler interpolates between values, so one
    diverging trial's loss of 1000 at a rung would put the cutoff far above chance level and let
    every chance-level trial after it through.  cutoff="interpolated" is Ray's (the benchmarks'
    lever).  `records`: the rung file (tuner/scheduler.py)."""
    from .scheduler import RungScheduler
    return RungScheduler(budget.rungs, budget.max_epochs, budget.reduction_factor, metric=metric, mode=mode,
                         promotion=budget.asha == "promotion" if promotion is None else promotion,
                         cutoff=cutoff, records=records)


def reuse_actors(exp: Experiment, shared: bool = False) -> bool:
    """Tune reuses a trial's actor for the next trial (~0.3 s between trials instead of ~2 s),
    except for TorchTrainer trials: a reused actor's second trial never received its Train
    workers' reports (seen with Ray 2.60: the run waited for ever), and such a trial takes
    10-15 s to start its workers anyway.  Nor under the service (`shared`): a finished trial's
    cached actor goes to the next pending trial and cancels the new actor Tune had asked for,
    so with trials shorter than an actor's start an experiment whose share grew never took up
    its new slots (seen in CI: under 3 of 4 CPUs held for a minute)."""
    return not (exp.resources.workers > 1 and exp.resources.ddp == "train") and not shared


def trial_folder_name(trial) -> str:
    """`trial_<id>`: short, and the id the console and `status` print (Tune's default name
    strings every setting together)."""
    return f"trial_{trial.trial_id}"


def console_for(exp: Experiment):
    from .console import Console
    b = exp.budget
    return Console(total=b.num_samples, metric=exp.metric, mode=exp.mode, searched=[p.name for p in exp.searched],
                   max_epochs=b.max_epochs, grace_epochs=b.grace_epochs, reduction_factor=b.reduction_factor)


def trainable_for(exp: Experiment):
    r = exp.resources
    return make_trainable(r.workers, r.cpus_per_worker, r.gpus_per_worker, storage.join(exp.location, "train-runs"),
                          worker_failures=r.worker_failures, keep_by=(exp.metric, exp.mode),
                          accelerator=r.accelerator or "", placement_strategy=r.placement_strategy,
                          ddp="local" if r.ddp == "local" else "train")

