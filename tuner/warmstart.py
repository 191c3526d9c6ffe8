"""Warm start: an earlier experiment's study trials, re-expressed in this experiment's space, seed
the searcher before its first proposal (`warm_start:` in YAML, `tuner run --warm-start DIR`).

The earlier folder passes the same trust check as `resume`.  It must have the same metric(s),
mode(s) and dataset, else one error.  Each earlier trial's values are replayed through this
experiment's search space: a trial with a value outside it (or without a setting it now needs)
is dropped, with a note.  Per-epoch values are moved to the same fraction of this experiment's
max_epochs when the two differ.  Finished trials come in as COMPLETE, ASHA-stopped ones as PRUNED
with their per-epoch values; failed ones are left out.
"""
from __future__ import annotations

import math
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from .schema import Experiment, ExperimentError


class OutOfSpace(Exception):
    """An earlier value this experiment's space cannot hold (the reason is the message)."""


class Replay:
    """Stands in for an Optuna trial while the space draws: each draw returns the earlier
    trial's value, checked against this experiment's range, and records the distribution."""

    def __init__(self, params: dict[str, Any]):
        self.params = params
        self.distributions: dict[str, Any] = {}
        self.taken: dict[str, Any] = {}

    def take(self, name: str, dist, ok: bool | None = None) -> Any:
        if name not in self.params:
            raise OutOfSpace(f"{name} not set")
        v = self.params[name]
        if ok is None:
            ok = dist.low - 1e-12 <= v <= dist.high + 1e-12
        if not ok:
            raise OutOfSpace(f"{name}={v!r} outside the new space")
        self.distributions[name], self.taken[name] = dist, v
        return v

    def suggest_float(self, name, low, high, *, log=False, step=None):
        from optuna.distributions import FloatDistribution
        dist = FloatDistribution(low, high, log=log, step=step)
        v = self.params.get(name)
        on_step = step is None or not isinstance(v, (int, float)) or \
            math.isclose((v - low) / step, round((v - low) / step), abs_tol=1e-6)
        return self.take(name, dist, None if on_step else False)

    def suggest_int(self, name, low, high, *, step=1, log=False):
        from optuna.distributions import IntDistribution
        v = self.params.get(name)
        ok = isinstance(v, int) and low <= v <= high and (v - low) % step == 0
        return self.take(name, IntDistribution(low, high, step=step, log=log), ok)

    def suggest_categorical(self, name, choices):
        from optuna.distributions import CategoricalDistribution
        return self.take(name, CategoricalDistribution(choices), self.params.get(name) in choices)


def _same(exp: Experiment, old: Experiment) -> list[str]:
    src = exp.warm_start
    out = []
    if exp.metrics != old.metrics or exp.modes != old.modes:
        out.append(f"warm_start: {src} optimised {list(zip(old.metrics, old.modes))}, this experiment "
                   f"{list(zip(exp.metrics, exp.modes))}; warm-start from an experiment with the same metric and mode")
    if exp.train.dataset != old.train.dataset:
        out.append(f"warm_start: {src} trained on {old.train.dataset!r}, this experiment on "
                   f"{exp.train.dataset!r}; warm-start from an experiment on the same dataset")
    return out


def earlier_study(old: Experiment):
    """The earlier experiment's Optuna study, read from a copy of its journal (opening it in
    place would write a lock file into the earlier folder)."""
    import optuna

    from .searcher import JOURNAL, journal_storage
    journal = old.exp_dir / JOURNAL
    if not journal.is_file():
        raise ExperimentError(str(old.exp_dir), [(f"warm_start: {journal} is missing: the earlier experiment "
                                                 "searched nothing, or the folder is incomplete")])
    tmp = Path(tempfile.mkdtemp(prefix="tuner-warm-"))
    try:
        shutil.copyfile(journal, tmp / JOURNAL)
        storage = journal_storage(tmp / JOURNAL)
        names = optuna.get_all_study_names(storage)
        if len(names) != 1:
            raise ExperimentError(str(journal), [f"warm_start: the journal holds {len(names)} studies, expected one"])
        return optuna.load_study(study_name=names[0], storage=storage).get_trials(deepcopy=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replay(t, space, max_epochs: int, scale: float, source: str):
    """An earlier COMPLETE or PRUNED study trial as a trial of this experiment's study: its values
    drawn again through `space` (OutOfSpace when one does not fit), its per-epoch values moved to
    the same fraction of `max_epochs` (`scale`: new max_epochs / old)."""
    import optuna
    from optuna.trial import TrialState
    r = Replay(t.params)
    space(r)
    steps: dict[int, float] = {}
    for step, v in sorted(t.intermediate_values.items()):
        steps[max(1, min(max_epochs, round(step * scale)))] = v
    done = t.state == TrialState.COMPLETE
    return optuna.trial.create_trial(
        state=t.state, params=r.taken, distributions=r.distributions, values=t.values if done else None,
        intermediate_values=steps, user_attrs={"warm_start": source, "warm_start_number": t.number})


def warm_trials(exp: Experiment) -> tuple[list, list[str]]:
    """(Optuna FrozenTrials for this experiment's study, notes for the console)."""
    from optuna.trial import TrialState

    from .experiment import load_saved
    from .space import SearchSpace
    if not exp.warm_start:
        return [], []
    if not exp.search:
        raise ExperimentError(str(exp.warm_start), ["warm_start: this experiment searches nothing; remove warm_start"])
    old = load_saved(exp.warm_start, journal=True)   # the trust check of `resume`
    problems = _same(exp, old)
    if problems:
        raise ExperimentError(str(exp.warm_start), problems)
    space = SearchSpace(exp.search)
    scale = exp.budget.max_epochs / old.budget.max_epochs
    out: list = []
    dropped: Counter[str] = Counter()
    for t in earlier_study(old):
        if t.state not in (TrialState.COMPLETE, TrialState.PRUNED):
            continue
        try:
            out.append(replay(t, space, exp.budget.max_epochs, scale, str(exp.warm_start)))
        except OutOfSpace as e:
            dropped[str(e)] += 1
    notes = [f"warm start: {len(out)} trials from {exp.warm_start}"]
    if scale != 1:
        notes.append(f"warm start: epochs rescaled x{scale:g} (max_epochs {old.budget.max_epochs} -> "
                     f"{exp.budget.max_epochs})")
    for why, n in dropped.most_common():
        notes.append(f"warm start: {n} trial(s) dropped: {why}")
    return out, notes
