"""The searcher settings the search benchmarks try against the shipped one.

Production code (tuner.searcher) takes a sampler and the rungs as arguments; what is varied
here is built here: TPE with a share of start-up trials, a good set as a fraction, random draws
interleaved with TPE's, TPE or independent draws below GUIDED_FROM.
"""
from __future__ import annotations

import math
from typing import Any

import optuna

from tuner.searcher import GUIDED_FROM, TPE_STARTUP, make_searcher, sobol_sampler, tpe_sampler

MIN_STARTUP = 4


class TopFraction:
    """TPE's gamma as a fraction of the trials so far (a class, not a lambda: the sampler is
    pickled with the searcher)."""

    def __init__(self, fraction: float, cap: int = 25, floor: int = 1):
        self.fraction, self.cap, self.floor = fraction, cap, floor

    def __call__(self, n: int) -> int:
        return min(max(math.ceil(self.fraction * n), self.floor), self.cap, n)


class InterleavedTPESampler(optuna.samplers.TPESampler):
    """TPE that draws every `random_every`-th trial (by trial number) at random, after its
    start-up trials too; every random draw, start-up ones included, comes from one stream.
    random_every 0: plain TPE."""

    def __init__(self, *, random_every: int = 0, n_startup_trials: int = TPE_STARTUP, **settings: Any):
        super().__init__(n_startup_trials=n_startup_trials, **settings)
        self.random_every, self.startup = random_every, n_startup_trials
        self.random = optuna.samplers.RandomSampler(seed=settings.get("seed"))

    def at_random(self, trial: optuna.trial.FrozenTrial) -> bool:
        k = self.random_every
        return trial.number < self.startup or (k > 0 and trial.number % k == k - 1)

    def sample_relative(self, study, trial, search_space):
        return {} if self.at_random(trial) else super().sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        if self.at_random(trial):
            return self.random.sample_independent(study, trial, param_name, param_distribution)
        return super().sample_independent(study, trial, param_name, param_distribution)


def startup_trials(num_samples: int, fraction: float | None, guided_from: int) -> int:
    if num_samples < guided_from:
        return num_samples
    return TPE_STARTUP if not fraction else max(MIN_STARTUP, round(fraction * num_samples))


def variant_searcher(search: dict, metric, mode, seed: int | None, budget, *, startup_fraction: float | None = None,
                     gamma_fraction: float | None = None, earned: bool = False, random_every: int = 0,
                     guided_from: int = GUIDED_FROM, qmc: bool = True, **tpe: Any):
    """tuner.searcher.make_searcher with a varied sampler (and, `earned`, ASHA's rungs told)."""
    if gamma_fraction:
        tpe["gamma"] = TopFraction(gamma_fraction)
    startup = startup_trials(budget.num_samples, startup_fraction, guided_from)
    if qmc and startup >= budget.num_samples:
        sampler = sobol_sampler(seed)
    elif random_every:
        sampler = InterleavedTPESampler(random_every=random_every, **{"seed": seed, "group": True, "multivariate": True,
                                                                      "n_startup_trials": startup, **tpe})
    else:
        sampler = tpe_sampler(seed, n_startup_trials=startup, **tpe)
    return make_searcher(search, metric, mode, seed, budget, sampler=sampler, rungs=budget.rungs if earned else ())
