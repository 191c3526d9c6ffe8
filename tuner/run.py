"""Run and resume an experiment: validate, connect, check the cluster, fit, summarize."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trainables import settings
from trainables.runtime import storage
from tuner import local_ray
from tuner.cluster import (
    NodeCheck,
    concurrency_for,
    fitting_concurrency,
    preflight,
    ready_train_view,
    resolve_ddp,
)
from tuner.connect import connect
from tuner.experiment import EXPERIMENT_FILE, load_saved, save_experiment
from tuner.schema import Experiment, ExperimentError
from tuner.summary import summarize
from tuner.tuning import build_tuner, trainable_for


def _fit(exp: Experiment, tuner, session_dir: str | None):
    """Tuner.fit(), with the embedded Ray (if any) recorded in the experiment folder while it runs."""
    if not session_dir:
        return tuner.fit()
    local_ray.record(exp.exp_dir, session_dir)
    try:
        return tuner.fit()
    finally:  # this process shuts its Ray down as it ends; only a killed one leaves processes behind
        local_ray.forget(exp.exp_dir)


def run_experiment(exp: Experiment, address: str | None = None, echo: Callable[[str], None] = print,
                   allow_no_auth: bool = False, verbose: bool = False):
    """Validate-then-run: refuses an existing experiment folder, checks that a trial fits."""

    from .paths import settle
    exp = settle(exp)   # absolute paths, and never into a Ray job's temporary copy of the working dir
    if storage.exists(storage.join(exp.location, EXPERIMENT_FILE)):
        raise ExperimentError(exp.location, [
            "this experiment folder exists already; `tuner resume " + exp.location + "` continues it, or "
            "choose another name (--set name=NEW)"])
    preflight(exp)
    from .warmstart import warm_trials
    warm, notes = warm_trials(exp)   # the earlier folder checked before Ray starts
    if exp.remote and exp.exp_dir.exists():  # a local copy left from an experiment since deleted there
        import shutil
        shutil.rmtree(exp.exp_dir)
    local_ray.end_leftovers(exp.exp_dir.parent, echo)
    nodes = NodeCheck(exp)
    try:
        session_dir = connect(address, exp, echo, allow_no_auth, verbose, env=nodes.env)
        asked, exp = exp, resolve_ddp(exp)
        concurrency = concurrency_for(exp, echo)   # a trial no node can ever hold: refused first
        if settings.read().service_id:   # the service's fair share decides how many of these run
            import ray
            concurrency = fitting_concurrency(exp, ray.cluster_resources())
        if exp.reproducible:
            concurrency = 1   # what several trials at once report first depends on timing
        nodes.check_nodes()
        ready_train_view(exp)
        save_experiment(asked)
        echo(f"experiment {exp.name}: {exp.budget.num_samples} trials, up to {concurrency} at once, "
             f"ASHA over {exp.budget.max_epochs} epochs; results in {exp.location}")
        echo(f"watch: tensorboard --logdir {exp.location}")
        for note in notes:
            echo(note)
        if exp.resources.workers > 1:
            echo(f"DDP: {exp.resources.workers} ranks per trial, " + (
                "started by the trial on its node (resources.ddp: local)" if exp.resources.ddp == "local"
                else "on Ray Train workers (resources.ddp: train)"))
        return summarize(exp, _fit(exp, build_tuner(exp, concurrency, verbose, warm=warm), session_dir))
    finally:
        nodes.remove()


def resume_experiment(exp_dir: str | Path, address: str | None = None, echo: Callable[[str], None] = print,
                      allow_no_auth: bool = False, verbose: bool = False):
    exp = load_saved(exp_dir, journal=True)
    preflight(exp)
    local_ray.end_leftovers(exp.exp_dir.parent, echo)
    nodes = NodeCheck(exp)
    try:
        return _resume(exp, exp_dir, address, echo, allow_no_auth, verbose, nodes)
    finally:
        nodes.remove()


def _resume(exp: Experiment, exp_dir, address, echo, allow_no_auth, verbose, nodes: NodeCheck):
    from ray import tune
    session_dir = connect(address, exp, echo, allow_no_auth, verbose, env=nodes.env)
    exp = resolve_ddp(exp)
    concurrency_for(exp, echo)
    nodes.check_nodes()
    ready_train_view(exp)
    if not tune.Tuner.can_restore(exp.location):
        raise ExperimentError(str(exp_dir), ["no Tune state to resume from in this folder"])
    from . import _compat
    tuner = tune.Tuner.restore(exp.location, trainable=trainable_for(exp), resume_unfinished=True,
                               resume_errored=True)
    searcher = _compat.restored_searcher(tuner)
    if searcher is not None:
        searcher.experiment_dir = str(exp.exp_dir)   # where the searcher's journal is now
        from .share import from_env
        searcher.share = from_env(searcher.max_concurrent)   # the service's fair share, as at the start
    from .scheduler import RUNG_FILE, RungScheduler
    scheduler = _compat.restored_scheduler(tuner)
    if isinstance(scheduler, RungScheduler):   # its rung records, where the folder is now
        scheduler.records, scheduler.loaded = str(exp.exp_dir / RUNG_FILE), False
        try:
            scheduler.load()
        except ValueError as e:
            raise ExperimentError(str(exp_dir), [str(e)]) from None
    echo(f"resuming {exp.location}")
    return summarize(exp, _fit(exp, tuner, session_dir))

