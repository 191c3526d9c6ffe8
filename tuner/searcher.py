"""A fidelity-aware Optuna searcher for ASHA.

Ray's OptunaSearch tells Optuna an ASHA-stopped trial as COMPLETE with its partial
metric, so TPE would learn from a 1-epoch score as if it were final.  Here each epoch's
metric becomes an intermediate value at step `epoch`, a trial stopped before the last
epoch is told as PRUNED (TPE ranks those by their last intermediate value), a finished
one as COMPLETE, and one that ended with status diverged/infeasible as FAIL.  A NaN is
never told to Optuna.

A search of fewer than GUIDED_FROM trials draws from a scrambled Sobol sequence instead of TPE,
and ASHA's brackets take their rung cutoff by rank (RankedBracket, used by tuner.tuning.asha).
"""
from __future__ import annotations

import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState
from ray.tune.schedulers.async_hyperband import _Bracket
from ray.tune.search.optuna import OptunaSearch

from .text import finite

log = logging.getLogger(__name__)

JOURNAL = "optuna-journal.log"  # the study, in the experiment folder: `optuna-dashboard` reads it
# Set by `resume` to the experiment folder where it is now: Tune restores the searcher from a
# staging copy of its snapshot, so the snapshot's own folder does not say where the journal is.
EXPERIMENT_DIR_ENV = "TUNER_EXPERIMENT_DIR"


def journal_storage(path: str | Path) -> optuna.storages.JournalStorage:
    from optuna.storages.journal import JournalFileBackend
    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


# Trials TPE draws at random before it models the results, as a fraction of the search's
# trials (at least MIN_STARTUP); None: Optuna's fixed 10.
STARTUP_FRACTION: float | None = None
MIN_STARTUP = 4
# A search of fewer trials than GUIDED_FROM draws every trial from a scrambled Sobol sequence
# (under ASHA all the same): after Optuna's 10 start-up trials too few guided ones are left for
# TPE's model to pay for itself, and a low-discrepancy sequence covers the space more evenly
# than independent draws.  Measured (BENCHMARKS.md, "Small searches"): TPE after 10 random
# trials was level with random draws on the Hartmann screen at 16 and 20 trials (and spent
# 15-30 % more trial-epochs), ahead from 24 and significantly from 28; on digits at 16 trials
# TPE and random draws were level; Sobol was ahead of random draws in mean in all four
# comparisons (two seed sets each), none significant on its own.
GUIDED_FROM = 24


def startup_trials(num_samples: int, fraction: float | None = None, guided_from: int | None = None) -> int:
    if num_samples < (GUIDED_FROM if guided_from is None else guided_from):
        return num_samples
    fraction = STARTUP_FRACTION if fraction is None else fraction
    return 10 if not fraction else max(MIN_STARTUP, round(fraction * num_samples))


class TopFraction:
    """TPE's gamma as a fraction of the trials so far (a class, not a lambda: the sampler is
    pickled with the searcher's snapshot)."""

    def __init__(self, fraction: float, cap: int = 25, floor: int = 1):
        self.fraction, self.cap, self.floor = fraction, cap, floor

    def __call__(self, n: int) -> int:
        return min(max(math.ceil(self.fraction * n), self.floor), self.cap, n)


def make_searcher(search: dict, metric: str | list[str], mode: str | list[str], seed: int | None, budget,
                  storage: optuna.storages.BaseStorage | None = None, study_name: str | None = None,
                  startup_fraction: float | None = None, gamma_fraction: float | None = None,
                  earned: bool = False, random_every: int = 0, guided_from: int | None = None,
                  qmc: bool = True, **tpe: Any) -> "FidelityOptunaSearch":
    """The searcher of a run: fidelity-aware TPE over the experiment's (define-by-run) space,
    or below GUIDED_FROM trials a scrambled Sobol sequence.  startup_fraction, gamma_fraction,
    earned, random_every, guided_from, qmc (False: independent random draws below GUIDED_FROM)
    and `tpe` (TPESampler settings) are the benchmark's levers."""
    from .space import SearchSpace
    if gamma_fraction:
        tpe["gamma"] = TopFraction(gamma_fraction)
    startup = startup_trials(budget.num_samples, startup_fraction, guided_from)
    if qmc and startup >= budget.num_samples:
        sampler = sobol_sampler(seed)
    else:
        sampler = tpe_sampler(seed, n_startup_trials=startup, random_every=random_every, **tpe)
    return FidelityOptunaSearch(space=SearchSpace(search), metric=metric, mode=mode, sampler=sampler,
                                storage=storage, study_name=study_name, max_epochs=budget.max_epochs,
                                rungs=budget.rungs if earned else (), eta=budget.reduction_factor)


class RankedBracket(_Bracket):
    """ASHA's bracket with its rung cutoff taken by rank: a value some trial recorded there
    (tuner.tuning.asha says why)."""

    def cutoff(self, recorded):
        if not recorded:
            return None
        return np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100, method="nearest")



def tpe_sampler(seed: int | None, random_every: int = 0, **settings: Any) -> optuna.samplers.TPESampler:
    """The study's sampler: multivariate TPE with the constant liar (Optuna's defaults), and
    `group=True`, so the parameters of a conditional space's branches are modelled per branch."""
    import warnings
    with warnings.catch_warnings():  # `group` and `multivariate` are marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return InterleavedTPESampler(seed=seed, group=True, random_every=random_every,
                                     **{"multivariate": True, **settings})


def sobol_sampler(seed: int | None) -> optuna.samplers.QMCSampler:
    """A scrambled Sobol sequence over the space of the study's first trial (drawn at random); a
    setting outside it (another branch of a conditional choice) is drawn at random."""
    import warnings
    with warnings.catch_warnings():  # QMCSampler is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed,
                                          warn_independent_sampling=False, warn_asynchronous_seeding=False)


class InterleavedTPESampler(optuna.samplers.TPESampler):
    """TPE that draws every `random_every`-th trial (by trial number) at random, after its
    start-up trials too: a model fitted to a few noisy early-rung results cannot steer every
    proposal.  random_every 0: plain TPE."""

    def __init__(self, *, random_every: int = 0, **settings: Any):
        super().__init__(**settings)
        self.random_every = random_every

    def _at_random(self, trial: optuna.trial.FrozenTrial) -> bool:
        k = getattr(self, "random_every", 0)
        return k > 0 and trial.number % k == k - 1

    def sample_relative(self, study, trial, search_space):
        return {} if self._at_random(trial) else super().sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        if self._at_random(trial):
            return self._random_sampler.sample_independent(study, trial, param_name, param_distribution)
        return super().sample_independent(study, trial, param_name, param_distribution)



class FidelityOptunaSearch(OptunaSearch):
    """rungs (ASHA's comparison epochs), when given: a trial that passed a rung before eta - 1
    others had reached it (asynchronous ASHA lets the first arrivals through unjudged) is told
    to Optuna only up to that rung, as PRUNED there, so that TPE does not rank it above trials
    that were compared."""

    def __init__(self, *args: Any, max_epochs: int, rungs: tuple[int, ...] = (), eta: float = 3, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.max_epochs = max_epochs
        self.rungs, self.eta = tuple(rungs), eta
        self.rung_seen: dict[int, int] = {}      # rung -> trials that reported there
        self.unjudged: dict[str, int] = {}       # trial -> the first rung it reached unjudged
        self.last_results: dict[str, dict] = {}
        self.reported: dict[str, set[int]] = {}
        # For cloud storage: the local journal, copied beside each snapshot so that Tune
        # uploads it with the rest of the experiment's state.
        self.journal_upload: str | None = None

    @property
    def study(self) -> optuna.Study:
        return self._ot_study

    def save(self, checkpoint_path: str) -> None:
        super().save(checkpoint_path)
        if self.journal_upload:
            shutil.copyfile(self.journal_upload, Path(checkpoint_path).parent / JOURNAL)

    def restore(self, checkpoint_path: str) -> None:
        """Tune's snapshot of the searcher, with its study re-opened from the journal in the
        experiment folder where it is now (it may have moved), and the study trials a killed
        driver left RUNNING without a Tune trial told FAIL."""
        super().restore(checkpoint_path)
        if not isinstance(self._storage, optuna.storages.JournalStorage):
            return
        folder = os.environ.get(EXPERIMENT_DIR_ENV) or Path(checkpoint_path).parent
        journal = Path(folder) / JOURNAL
        if not journal.is_file():
            raise FileNotFoundError(f"{journal}: the experiment's Optuna journal is missing; "
                                    "resume needs the whole experiment folder")
        self._storage = journal_storage(journal)
        if getattr(self, "journal_upload", None):
            self.journal_upload = str(journal)
        self._ot_study = optuna.load_study(study_name=self._study_name, storage=self._storage,
                                           sampler=self._ot_study.sampler)
        self._ot_trials = {tid: optuna.trial.Trial(self._ot_study, t._trial_id) for tid, t in self._ot_trials.items()}
        tracked = {t._trial_id for t in self._ot_trials.values()}
        for t in self._ot_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t._trial_id not in tracked:
                self._ot_study.tell(t.number, state=TrialState.FAIL)
                log.info("study trial %d had no Tune trial after the restart: told FAIL", t.number)

    def _objectives(self) -> list[str]:
        return list(self._metric) if isinstance(self._metric, list) else [self._metric]

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return
        self.last_results[trial_id] = result
        self._report(trial_id, result)

    def _report(self, trial_id: str, result: dict) -> None:
        if isinstance(self._metric, list):  # Optuna takes no intermediate values for several objectives
            return
        value, epoch = result.get(self._metric), result.get("epoch")
        if result.get("status", "ok") != "ok" or not finite(value) or epoch is None:
            return
        steps = self.reported.setdefault(trial_id, set())
        epoch, unjudged = int(epoch), getattr(self, "unjudged", {})
        if epoch in getattr(self, "rungs", ()) and epoch not in steps:
            seen = self.rung_seen.get(epoch, 0)
            self.rung_seen[epoch] = seen + 1
            if seen < self.eta - 1 and trial_id not in unjudged:
                unjudged[trial_id] = epoch
        if epoch in steps or epoch > unjudged.get(trial_id, epoch):
            return  # a repeat (a resumed trial; Optuna warns on those) or past a rung passed unjudged
        self._ot_trials[trial_id].report(float(value), step=epoch)
        steps.add(epoch)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return
        result = result or self.last_results.get(trial_id) or {}
        # Tune hands the result a trial stopped or finished on to this call only.
        self._report(trial_id, result)
        trial = self._ot_trials[trial_id]
        values = [result.get(m) for m in self._objectives()]
        status = result.get("status", "ok")
        if error or status != "ok" or not all(finite(v) for v in values):
            state, told = TrialState.FAIL, None
        elif int(result.get("epoch", 0)) < self.max_epochs or trial_id in getattr(self, "unjudged", {}):
            state, told = TrialState.PRUNED, None
        else:
            state, told = TrialState.COMPLETE, (values if isinstance(self._metric, list) else values[0])
        try:
            self._ot_study.tell(trial, told, state=state)
        except Exception as e:  # never let bookkeeping end the search
            log.warning("optuna tell for trial %s failed: %s", trial_id, e)
        self._completed_trials.add(trial_id)
        self.last_results.pop(trial_id, None)
        self.reported.pop(trial_id, None)
        getattr(self, "unjudged", {}).pop(trial_id, None)
