"""The search space as Optuna's define-by-run: one object that draws a trial's settings.

Every search goes through it, branches or not.  A choice with branches draws its option,
then the option's own settings under branch-qualified names (`lr[optimizer=sgd]`), so TPE
models each branch on its own; `group=True` in the sampler keeps the branches' parameter
groups apart.  The object returns the training settings by their own names (`lr`); Ray
also puts the qualified names it saw into the trial's config, and
`trainables.config.training_settings` drops them before TrainConfig sees the config.
The object is a module-level class holding plain data: the searcher's snapshot pickles it
for `resume`.
"""
from __future__ import annotations

import math
from typing import Any

from trainables.config import branch_name as qualified

from .schema import Experiment, SearchEntry, branch_of


def distribution(e: SearchEntry):
    """The Optuna distribution of a search entry (a log range ignores q: Optuna has no
    quantised log scale; the drawn value is rounded to q afterwards)."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )
    if e.type == "choice":
        return CategoricalDistribution(list(e.values or []))
    if e.type == "int":
        return IntDistribution(int(e.lo), int(e.hi), step=int(e.q or 1))
    if e.type == "loguniform":
        return FloatDistribution(e.lo, e.hi, log=True)
    return FloatDistribution(e.lo, e.hi, step=e.q)


def _quantised(e: SearchEntry, v: Any) -> Any:
    if e.type != "loguniform" or not e.q:
        return v
    steps = max(math.ceil(e.lo / e.q - 1e-9), min(math.floor(e.hi / e.q + 1e-9), round(v / e.q)))
    return steps * e.q


class SearchSpace:
    """Optuna define-by-run space of an experiment's `search:` section; calling it with an
    Optuna trial draws one config (training setting -> value)."""

    def __init__(self, search: dict[str, SearchEntry]):
        self.search = {k: e.model_dump() for k, e in search.items()}  # plain data pickles across versions

    def __call__(self, trial) -> dict[str, Any]:
        return self._draw(trial, {k: SearchEntry.model_validate(e) for k, e in self.search.items()}, ())

    def _draw(self, trial, search: dict[str, SearchEntry], when: tuple) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, e in search.items():
            name = qualified(key, when)
            v = _suggest(trial, name, e)
            out[key] = _quantised(e, v)
            if e.type == "choice" and e.branches:
                out.update(self._draw(trial, branch_of(v, e), when + ((key, v),)))
        return out


def _suggest(trial, name: str, e: SearchEntry) -> Any:
    """One draw through Optuna's suggest API (what Ray records into the trial's config)."""
    if e.type == "choice":
        return trial.suggest_categorical(name, list(e.values or []))
    if e.type == "int":
        return trial.suggest_int(name, int(e.lo), int(e.hi), step=int(e.q or 1))
    if e.type == "loguniform":
        return trial.suggest_float(name, e.lo, e.hi, log=True)
    return trial.suggest_float(name, e.lo, e.hi, step=e.q)


def param_space(exp: Experiment) -> dict[str, Any]:
    """What Tune gets as its param_space: the fixed training settings only (the searcher draws
    the rest)."""
    return dict(exp.base_config())
