"""A fidelity-aware searcher for ASHA, on Ray's public `Searcher` and Optuna's ask/tell API.

Ray's OptunaSearch tells Optuna an ASHA-stopped trial as COMPLETE with its partial metric, so
TPE would learn from a 1-epoch score as if it were final.  Here each epoch's metric becomes an
intermediate value at step `epoch`, a trial stopped before the last epoch is told as PRUNED
(TPE ranks those by their last intermediate value), a finished one as COMPLETE, and one that
ended with status diverged/infeasible as FAIL.  A NaN is never told to Optuna.

The study lives in an Optuna journal in the experiment folder (`optuna-dashboard` reads it);
the searcher's own snapshot holds plain values only (which Tune trial is which study trial, by
number), and `restore` re-opens the journal where the experiment folder is now.

A search of fewer than GUIDED_FROM trials draws from a scrambled Sobol sequence instead of TPE.
"""
from __future__ import annotations

import contextlib
import logging
import pickle
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState
from ray.tune.search import Searcher
from threadpoolctl import threadpool_limits

from .space import SearchSpace
from .text import finite

log = logging.getLogger(__name__)

JOURNAL = "optuna-journal.log"  # the study, in the experiment folder
# A search of fewer trials than GUIDED_FROM draws every trial from a scrambled Sobol sequence
# (under ASHA all the same): after Optuna's 10 start-up trials too few guided ones are left for
# TPE's model to pay for itself, and a low-discrepancy sequence covers the space more evenly
# than independent draws.  Measured (BENCHMARKS.md, "Small searches"): TPE after 10 random
# trials was level with random draws on the Hartmann screen at 16 and 20 trials (and spent
# 15-30 % more trial-epochs), ahead from 24 and significantly from 28; on digits at 16 trials
# TPE and random draws were level; Sobol was ahead of random draws in mean in all four
# comparisons (two seed sets each), none significant on its own.
GUIDED_FROM = 24
TPE_STARTUP = 10   # Optuna's default start-up trials (drawn at random before TPE models)
GP_POINTS = 200    # the most points a rung's Gaussian process models (then TPE does)
# What models a rung of a space without branches: every other proposal from a Gaussian process,
# the others from TPE.  Measured against TPE alone (BENCHMARKS.md, "A Gaussian process in the
# rung model"): a GP alone was stuck at a local optimum in some seeds of Hartmann-6; taking turns
# with TPE kept most of its gain without that.  A space with branches keeps TPE (a GP models only
# the settings every trial has).
RUNG_SAMPLER = "mix"
# The rung a GP proposal models: the one below the top rung with enough points, while it has at
# least GP_LOWER_POINTS times the top rung's points and orders the top rung's trials as the top rung
# does (at least GP_LOWER_AGREEMENT of their pairs in the same order); else the top rung.  There
# the GP fits two to three times the points.  Measured against the GP on the top rung at 30 seeds
# (BENCHMARKS.md, "The GP's rung"): ahead on both Hartmann-6 variants (where it took the lower rung
# in about half its turns; on h6_good the top rung alone trailed Syne Tune's Hyper-Tune
# significantly), level on digits (no turn there: its epochs order the trials less faithfully).
GP_LOWER_POINTS = 2
GP_LOWER_AGREEMENT = 0.9


def journal_storage(path: str | Path) -> optuna.storages.JournalStorage:
    from optuna.storages.journal import JournalFileBackend
    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


def tpe_sampler(seed: int | None, **settings: Any) -> optuna.samplers.TPESampler:
    """Multivariate TPE with the constant liar (Optuna's defaults), and `group=True`, so the
    parameters of a conditional space's branches are modelled per branch."""
    with warnings.catch_warnings():  # `group` and `multivariate` are marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(**{"seed": seed, "group": True, "multivariate": True, **settings})


def sobol_sampler(seed: int | None) -> optuna.samplers.QMCSampler:
    """A scrambled Sobol sequence over the space of the study's first trial (drawn at random); a
    setting outside it (another branch of a conditional choice) is drawn at random."""
    with warnings.catch_warnings():  # QMCSampler is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed,
                                          warn_independent_sampling=False, warn_asynchronous_seeding=False)


def gp_sampler(seed: int | None, n_startup_trials: int) -> optuna.samplers.GPSampler:
    """Optuna's Gaussian-process sampler (log expected improvement; q-batch over the proposals
    still pending), with random draws for settings outside its search space."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials,
                                         warn_independent_sampling=False)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """BLAS, OpenMP and torch on one thread while the searcher proposes: TPE's and the GP's
    matrices are a few hundred rows, which more threads only slow down (the frontier benchmark's
    smoke run on 2 cores: 52 s with two threads, 36-39 s with one), and the driver shares its
    machine with the trials.  The process's settings are restored after."""
    import torch
    before = torch.get_num_threads()
    with threadpool_limits(limits=1):
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)


def default_sampler(seed: int | None, num_samples: int, warm: bool = False) -> optuna.samplers.BaseSampler:
    """Sobol below GUIDED_FROM trials, TPE (after its start-up trials) from there on.  A warm
    start is TPE at any size: the earlier trials count towards its start-up trials, and a Sobol
    sequence would not look at them."""
    if num_samples < GUIDED_FROM and not warm:
        return sobol_sampler(seed)
    return tpe_sampler(seed, n_startup_trials=TPE_STARTUP)


def make_searcher(search: dict, metric: str | list[str], mode: str | list[str], seed: int | None, budget,
                  journal: str | Path | None = None, study_name: str = "tuner",
                  sampler: optuna.samplers.BaseSampler | None = None, rungs: tuple[int, ...] = (),
                  warm: bool = False, rung_model: bool | None = None,
                  rung_sampler: str | None = None, gp_lower: bool = True) -> FidelitySearcher:
    """The searcher of a run over the experiment's (define-by-run) space; `sampler`, `rungs`,
    `rung_model`, `rung_sampler` and `gp_lower` are what the benchmarks vary (default: default_sampler, no
    rung bookkeeping, and the rung model wherever TPE proposes: measured ahead of TPE over the
    study alone on digits and MF-Hartmann, level on Hartmann-6, BENCHMARKS.md; a Sobol search
    keeps its sequence; the rung model's sampler RUNG_SAMPLER, or TPE for a space with branches)."""
    if rung_model is None:
        rung_model = sampler is None and (warm or budget.num_samples >= GUIDED_FROM)
    if rung_sampler is None:
        rung_sampler = "tpe" if any(e.branches for e in search.values()) else RUNG_SAMPLER
    return FidelitySearcher(space=SearchSpace(search), metric=metric, mode=mode,
                            sampler=sampler or default_sampler(seed, budget.num_samples, warm), journal=journal,
                            study_name=study_name, max_epochs=budget.max_epochs, rungs=rungs,
                            eta=budget.reduction_factor,
                            model_rungs=(*budget.rungs, budget.max_epochs) if rung_model else (), seed=seed,
                            rung_sampler=rung_sampler, gp_lower=gp_lower)


class SlotSearcher(Searcher):
    """A searcher that keeps `max_concurrent_trials` itself: trials waiting at a rung of
    promotion-type ASHA (`waiting`, kept up to date by tuner.scheduler) hold no slot.  Ray's
    ConcurrencyLimiter, which Tune puts around a searcher, counts every trial not ended as
    running, so paused trials would fill every slot and the search would stall."""

    max_concurrent: int = 0           # 0: no limit of ours
    waiting: set[str] = frozenset()   # type: ignore[assignment]
    share: Any = None                 # tuner.share.Share under the service: the fair share caps the slots
    asked = 0.0                       # when Tune last asked for a trial that the cap refused

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self.max_concurrent = max_concurrent
        return True

    def running(self) -> int:
        raise NotImplementedError

    done = 0                          # trials ended, and the best first-objective value among them
    best: float | None = None

    def tally(self, result: dict | None) -> None:
        """A trial ended with `result`: counted, for the service's queue."""
        self.done += 1
        metric = self.metric[0] if isinstance(self.metric, list) else self.metric
        mode = self.mode[0] if isinstance(self.mode, list) else self.mode
        v = (result or {}).get(metric) if metric else None
        if finite(v) and (result or {}).get("status", "ok") == "ok":
            v = float(v)
            if self.best is None or (v > self.best if mode == "max" else v < self.best):
                self.best = v

    def cap(self) -> int:
        """The slots now: max_concurrent, or less under the service (its fair share); 0: no limit."""
        if self.share is None:
            return self.max_concurrent
        running = self.running()
        # What it wants: every slot while Tune asks for trials, what runs once it stops asking.
        wanted = self.max_concurrent if time.monotonic() - self.asked < 10 else running
        return max(1, min(self.max_concurrent or 10**6,
                          self.share.now(running, max(wanted, running), self.done, self.best)))

    def full(self) -> bool:
        """Called when Tune asks for a trial: no slot free now."""
        if self.share is not None:
            self.asked = time.monotonic()
        cap = self.cap()
        return cap > 0 and self.running() >= cap


class FixedSearcher(SlotSearcher):
    """An experiment with nothing searched under promotion-type ASHA: every trial takes the
    fixed settings (Tune's param_space), with the slots counted as above."""

    def __init__(self, metric: str | list[str] | None = None, mode: str | list[str] | None = None):
        super().__init__(metric=metric, mode=mode)   # type: ignore[arg-type]  # Ray takes a list for several objectives
        self.live: set[str] = set()

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        """True: metric and mode were given at construction (they are the experiment's)."""
        return True

    def running(self) -> int:
        return len(self.live - set(self.waiting))

    def suggest(self, trial_id: str) -> dict | None:
        if self.full():
            return None
        self.live.add(trial_id)
        return {}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id in self.live:
            self.tally(result)
        self.live.discard(trial_id)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.__dict__, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))


class FidelitySearcher(SlotSearcher):
    """Tune trials as Optuna study trials (ask/tell by trial number).

    rungs (ASHA's comparison epochs), when given: a trial that passed a rung before eta - 1
    others had reached it (asynchronous ASHA lets the first arrivals through unjudged) is told
    to Optuna only up to that rung, as PRUNED there, so that TPE does not rank it above trials
    that were compared."""

    def __init__(self, space: SearchSpace | None = None, metric: str | list[str] | None = None,
                 mode: str | list[str] | None = None, sampler: optuna.samplers.BaseSampler | None = None,
                 journal: str | Path | None = None, study_name: str = "tuner", *, max_epochs: int,
                 rungs: tuple[int, ...] = (), eta: float = 3, model_rungs: tuple[int, ...] = (),
                 seed: int | None = None, rung_sampler: str = "tpe", gp_lower: bool = True):
        super().__init__(metric=metric, mode=mode)
        # rung_sampler: what models a rung, "tpe", "gp" (a Gaussian process; proposals stay pending
        # in the rung's study until their trial reaches that rung or ends) or "mix" (alternately).
        self.rung_sampler = rung_sampler
        self.gp_lower = gp_lower   # False: the GP models the top rung, as TPE does (gp_rung)
        self.pending: dict[str, tuple[int, int]] = {}   # trial -> (rung, its proposal's number there)
        self.models: dict[int, tuple[Any, Any]] = {}    # rung -> (its TPE, its GP)
        self.proposals = 0
        # model_rungs: propose from a model of the values at the highest of these epochs
        # where enough trials have reported (each trial counts at every rung it reached, paused
        # and running ones included), as BOHB models its highest budget with enough points.
        self.model_rungs, self.seed = tuple(model_rungs), seed
        self.shadows: dict[int, optuna.Study] | None = None
        self.space, self.sampler = space, sampler or optuna.samplers.TPESampler()
        self.journal = str(journal) if journal else None
        self.study_name = study_name
        self.max_epochs, self.rungs, self.eta = max_epochs, tuple(rungs), eta
        self.numbers: dict[str, int] = {}         # Tune trial id -> study trial number
        self.completed: set[str] = set()
        self.rung_seen: dict[int, int] = {}       # rung -> trials that reported there
        self.unjudged: dict[str, int] = {}        # trial -> the first rung it reached unjudged
        self.last_results: dict[str, dict] = {}
        self.reported: dict[str, set[int]] = {}
        # For cloud storage: the local journal (and ASHA's rung records beside it), copied beside
        # each snapshot so that Tune uploads them with the rest of the experiment's state.
        self.journal_upload: str | None = None
        # Set by `resume` to the experiment folder where it is now: Tune restores a searcher
        # from a staging copy of its snapshot, which does not say where the journal is.
        self.experiment_dir: str | None = None
        self.live: dict[str, optuna.trial.Trial] = {}
        self.study_now: optuna.Study | None = None
        self.storage_now: optuna.storages.BaseStorage | None = None

    # ------------------------------------------------------------ the study

    @property
    def objectives(self) -> list[str]:
        return list(self.metric) if isinstance(self.metric, list) else [self.metric]

    @property
    def study(self) -> optuna.Study:
        if self.study_now is None:
            modes = self.mode if isinstance(self.mode, list) else [self.mode]
            if self.storage_now is None:
                self.storage_now = journal_storage(self.journal) if self.journal else optuna.storages.InMemoryStorage()
            self.study_now = optuna.create_study(
                storage=self.storage_now, sampler=self.sampler, pruner=optuna.pruners.NopPruner(), study_name=self.study_name,
                load_if_exists=True, directions=["minimize" if m == "min" else "maximize" for m in modes])
        return self.study_now

    def trial(self, trial_id: str) -> optuna.trial.Trial:
        """The study trial of a Tune trial, as an object to report to (re-made after a restore)."""
        if trial_id not in self.live:
            study, storage = self.study, self.storage_now
            assert storage is not None   # opened with the study
            number = self.numbers[trial_id]
            tid = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(self.study_name), number)
            self.live[trial_id] = optuna.trial.Trial(study, tid)
        return self.live[trial_id]

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        """True: the searcher has its own space, metric and mode (Tune's param_space holds the
        fixed settings only)."""
        return self.space is not None and self.metric is not None and self.mode is not None

    # ------------------------------------------------------------ Tune's calls

    def running(self) -> int:
        return len(set(self.numbers) - self.completed - set(self.waiting))

    def suggest(self, trial_id: str) -> dict | None:
        if self.space is None:
            raise RuntimeError("FidelitySearcher has no search space")
        if self.full():
            return None
        with one_thread():
            guided = self.rung_proposal(trial_id)
            if guided is not None:
                self.study.enqueue_trial(guided)
            t = self.study.ask()
        self.numbers[trial_id], self.live[trial_id] = t.number, t
        drawn = self.space(t)
        # Ray's config holds every name the study drew (`lr[optimizer=sgd]`) and the settings.
        return {**t.params, **drawn}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self.completed or trial_id not in self.numbers:
            return
        self.last_results[trial_id] = result
        self.report_result(trial_id, result)

    def report_result(self, trial_id: str, result: dict) -> None:
        if isinstance(self.metric, list):  # Optuna takes no intermediate values for several objectives
            return
        value, epoch = result.get(self.metric), result.get("epoch")
        if result.get("status", "ok") != "ok" or not finite(value) or epoch is None:
            return
        steps = self.reported.setdefault(trial_id, set())
        epoch = int(epoch)
        if epoch in self.rungs and epoch not in steps:
            seen = self.rung_seen.get(epoch, 0)
            self.rung_seen[epoch] = seen + 1
            if seen < self.eta - 1 and trial_id not in self.unjudged:
                self.unjudged[trial_id] = epoch
        if epoch in steps or epoch > self.unjudged.get(trial_id, epoch):
            return  # a repeat (a resumed trial; Optuna warns on those) or past a rung passed unjudged
        self.trial(trial_id).report(float(value), step=epoch)
        steps.add(epoch)
        if epoch in self.model_rungs and self.shadows is not None:
            t = self.trial(trial_id)
            self.shadow(epoch).add_trial(optuna.trial.create_trial(
                params=t.params, distributions=t.distributions, value=float(value),
                user_attrs={"trial": self.numbers[trial_id]}))
        self.settle(trial_id, epoch)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id in self.completed or trial_id not in self.numbers:
            return
        result = result or self.last_results.get(trial_id) or {}
        # Tune hands the result a trial stopped or finished on to this call only.
        self.report_result(trial_id, result)
        values = [result.get(m) for m in self.objectives]
        status = result.get("status", "ok")
        if error or status != "ok" or not all(finite(v) for v in values):
            state, told = TrialState.FAIL, None
        elif int(result.get("epoch", 0)) < self.max_epochs or trial_id in self.unjudged:
            state, told = TrialState.PRUNED, None
        else:
            state, told = TrialState.COMPLETE, (values if isinstance(self.metric, list) else values[0])
        try:
            self.study.tell(self.numbers[trial_id], told, state=state)
        except Exception as e:  # noqa: BLE001 - never let bookkeeping end the search
            log.warning("optuna tell for trial %s failed: %s", trial_id, e)
        self.completed.add(trial_id)
        self.settle(trial_id)
        self.tally(result)
        for d in (self.last_results, self.reported, self.unjudged, self.live):
            d.pop(trial_id, None)

    # ------------------------------------------------------------ the model over rungs

    def shadow(self, rung: int) -> optuna.Study:
        """An in-memory study of the values at one rung (TPE or a GP over them)."""
        assert self.shadows is not None
        if rung not in self.shadows:
            n, seed = self.min_points(), None if self.seed is None else self.seed + rung
            self.shadows[rung] = optuna.create_study(
                direction="minimize" if self.mode == "min" else "maximize",
                sampler=tpe_sampler(seed, n_startup_trials=n))
            gp = gp_sampler(seed, n) if self.rung_sampler != "tpe" else None   # built only where used
            self.models[rung] = (self.shadows[rung].sampler, gp)
        return self.shadows[rung]

    def min_points(self) -> int:
        """Trials a rung needs before it is modelled: TPE's start-up count, and at least the
        number of searched settings + 2."""
        return max(TPE_STARTUP, len(self.space.search) + 2 if self.space else 0)

    def rung_proposal(self, trial_id: str | None = None) -> dict[str, Any] | None:
        """Settings drawn from a model (TPE or a GP, as `rung_sampler` says) of the values at the
        highest model rung with enough points (None: no rung has them yet, or no rung model)."""
        if not self.model_rungs or isinstance(self.metric, list) or self.space is None:
            return None
        if self.shadows is None:   # built once from the study (a new or a restored searcher)
            self.shadows = {}
            for ft in self.study.get_trials(deepcopy=False):
                for step, v in ft.intermediate_values.items():
                    if step in self.model_rungs and finite(v):
                        self.shadow(step).add_trial(optuna.trial.create_trial(
                            params=ft.params, distributions=ft.distributions, value=float(v),
                            user_attrs={"trial": ft.number}))
        points = {r: len(self.shadows[r].get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
                  for r in self.model_rungs if r in self.shadows}
        ready = [r for r, n in points.items() if n >= self.min_points()]
        if not ready:
            return None
        rung = max(ready)
        # "gp": every proposal from the GP, "mix": every other one; TPE past GP_POINTS, since a
        # GP's proposal costs time growing with its points (BENCHMARKS.md).
        self.proposals += 1
        use_gp = self.rung_sampler == "gp" or (self.rung_sampler == "mix" and self.proposals % 2)
        if use_gp:
            rung = self.gp_rung(rung, points)
            use_gp = points[rung] <= GP_POINTS
        shadow, (tpe, gp) = self.shadows[rung], self.models[rung]
        shadow.sampler = gp if use_gp else tpe
        for waiting in set(self.pending) & set(self.waiting):   # paused at a rung: not running now
            self.settle(waiting)
        t = shadow.ask()
        self.space(t)
        if self.rung_sampler != "tpe" and trial_id is not None:
            self.pending[trial_id] = (rung, t.number)   # until its trial reaches the rung (TPE ignores it)
        else:
            shadow.tell(t, state=TrialState.FAIL)   # a draw, not a result: TPE leaves FAIL out
        return dict(t.params)

    def gp_rung(self, top: int, points: dict[int, int]) -> int:
        """The rung a GP proposal models (GP_LOWER_POINTS, GP_LOWER_AGREEMENT): the rung below
        `top` or `top` itself."""
        lower = [r for r, n in points.items() if r < top and n >= self.min_points()]
        if not lower or not self.gp_lower:
            return top
        low = max(lower)
        if not GP_LOWER_POINTS * points[top] <= points[low] <= GP_POINTS:
            return top
        return low if self.agreement(low, top) >= GP_LOWER_AGREEMENT else top

    def agreement(self, low: int, top: int) -> float:
        """Of the pairs of trials with a value at both rungs, the share the two rungs order alike
        (pairs tied at either rung left out; 0 with none)."""
        shadows = self.shadows
        assert shadows is not None

        def values(rung: int) -> dict[int, float]:
            return {t.user_attrs["trial"]: float(t.value) for t in
                    shadows[rung].get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                    if "trial" in t.user_attrs}
        at_low, at_top = values(low), values(top)
        both = [n for n in at_top if n in at_low]
        x, y = np.array([at_low[n] for n in both]), np.array([at_top[n] for n in both])
        order = np.sign(x[:, None] - x[None, :]) * np.sign(y[:, None] - y[None, :])
        pairs = np.count_nonzero(order)
        return float(np.count_nonzero(order > 0) / pairs) if pairs else 0.0

    def settle(self, trial_id: str, epoch: int | None = None) -> None:
        """The proposal of `trial_id` stops pending in its rung's study once the trial reaches
        that rung (`epoch`) or ends (None); its value there is added as a trial of its own."""
        rung, number = self.pending.get(trial_id, (None, None))
        if rung is None or (epoch is not None and epoch < rung):
            return
        del self.pending[trial_id]
        if self.shadows is not None and rung in self.shadows:
            self.shadows[rung].tell(number, state=TrialState.FAIL)

    # ------------------------------------------------------------ snapshots

    def __getstate__(self) -> dict[str, Any]:
        """Plain values and the sampler; the study is re-opened from its journal, never pickled
        (an in-memory study, with no journal, goes with its storage)."""
        drop: tuple[str, ...] = ("live", "study_now", "shadows", "pending", "models")
        drop = drop if self.journal is None else (*drop, "storage_now")
        return {k: v for k, v in self.__dict__.items() if k not in drop}

    def __setstate__(self, state: dict[str, Any]) -> None:
        from . import _compat
        self.__dict__.update(_compat.searcher_state(state))
        self.live, self.study_now, self.shadows, self.pending, self.models = {}, None, None, {}, {}
        self.__dict__.setdefault("storage_now", None)
        self.__dict__.setdefault("model_rungs", ())   # snapshots written before the rung model
        self.__dict__.setdefault("seed", None)
        self.__dict__.setdefault("rung_sampler", "tpe")
        self.__dict__.setdefault("proposals", 0)
        self.__dict__.setdefault("gp_lower", True)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.__getstate__(), f)
        if self.journal_upload:
            shutil.copyfile(self.journal_upload, Path(checkpoint_path).parent / JOURNAL)
            # ASHA's rung records go up with it (they live beside the journal in the local copy).
            from .scheduler import RUNG_FILE
            rungs = Path(self.journal_upload).with_name(RUNG_FILE)
            if rungs.is_file():
                shutil.copyfile(rungs, Path(checkpoint_path).parent / RUNG_FILE)

    def restore(self, checkpoint_path: str) -> None:
        """Tune's snapshot of the searcher, with its study re-opened from the journal in the
        experiment folder where it is now (it may have moved), and the study trials a killed
        driver left RUNNING without a Tune trial told FAIL."""
        folder = self.experiment_dir or str(Path(checkpoint_path).parent)
        with open(checkpoint_path, "rb") as f:
            self.__setstate__(pickle.load(f))
        if not self.journal:
            return
        journal = Path(folder) / JOURNAL
        if not journal.is_file():
            raise FileNotFoundError(f"{journal}: the experiment's Optuna journal is missing; "
                                    "resume needs the whole experiment folder")
        self.journal, self.experiment_dir = str(journal), folder
        self.study_now = self.storage_now = None
        if self.journal_upload:
            self.journal_upload = str(journal)
        tracked = set(self.numbers.values())
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.number not in tracked:
                self.study.tell(t.number, state=TrialState.FAIL)
                log.info("study trial %d had no Tune trial after the restart: told FAIL", t.number)

