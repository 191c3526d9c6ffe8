"""Parameter importance per ASHA rung (Optuna's PED-ANOVA over every trial that reached the rung)."""
from __future__ import annotations

import math
from typing import Any

from .history import Trial
from .schema import Experiment, SearchEntry

MIN_RUNG_TRIALS = 8        # parameter importance is computed for a rung only with at least this many trials
TARGET_QUANTILE = 0.1      # PED-ANOVA's top set: the best 10 % of a rung's trials ...
MIN_TOP_TRIALS = 2         # ... but never fewer than two (one trial's values are no distribution)


def top_quantile(n: int) -> float | None:
    """PED-ANOVA's target quantile for n trials: TARGET_QUANTILE, raised so that its top set
    (Optuna takes the best ceil(q * n)) holds MIN_TOP_TRIALS; None when that leaves no trial
    outside the top set to compare it with."""
    q = max(TARGET_QUANTILE, MIN_TOP_TRIALS / n) if n else 1.0
    return q if q < 1.0 and math.ceil(q * n - 1e-9) < n else None


def entries(exp: Experiment) -> dict[str, SearchEntry]:
    """The searched settings by parameter name (a branch's as `lr[optimizer=sgd]`)."""
    return {p.name: p.entry for p in exp.searched}


def distributions(exp: Experiment) -> dict[str, Any]:
    from .space import distribution
    return {n: distribution(e) for n, e in entries(exp).items()}


def importance_by_rung(exp: Experiment, ts: list[Trial], min_trials: int = MIN_RUNG_TRIALS) -> list[dict[str, Any]]:
    """PED-ANOVA importance per ASHA rung, from an in-memory study per rung whose COMPLETE trials
    are every trial that reached the rung, valued there; its top set is the best 10 % of them,
    at least two (`top`).  Rungs with fewer than `min_trials` trials are listed as skipped."""
    import optuna
    from optuna.importance import PedAnovaImportanceEvaluator
    optuna.logging.set_verbosity(optuna.logging.WARNING)   # no line per in-memory study
    dists = distributions(exp)
    levels = sorted(set(list(exp.budget.rungs)
                        + [exp.budget.max_epochs]))
    out = []
    for r in levels:
        reached = [(t, v) for t in ts if (v := t.value_at(r, exp.metric)) is not None]
        q = top_quantile(len(reached))
        entry: dict[str, Any] = {"rung": r, "n": len(reached), "importance": None, "skipped": "", "top": 0}
        if len(reached) < min_trials:
            entry["skipped"] = f"{len(reached)} trial(s) < {min_trials}"
        elif q is None:
            entry["skipped"] = (f"{len(reached)} trial(s): PED-ANOVA compares its top {MIN_TOP_TRIALS} trials with "
                                "the others, and too few are left")
        else:
            study = optuna.create_study(direction="maximize" if exp.mode == "max" else "minimize")
            for t, v in reached:
                # A conditional space: each trial has the parameters of the branches it took;
                # the importance covers those every trial has.
                params = {n: (int(t.row.params[n]) if isinstance(d, optuna.distributions.IntDistribution)
                              else t.row.params[n]) for n, d in dists.items() if n in t.row.params}
                study.add_trial(optuna.trial.create_trial(params=params, distributions={n: dists[n] for n in params},
                                                          value=v))
            from . import _compat
            entry["top"] = _compat.pedanova_top([v for _, v in reached], q, exp.mode == "min")
            try:
                entry["importance"] = optuna.importance.get_param_importances(
                    study, evaluator=PedAnovaImportanceEvaluator(target_quantile=q), normalize=True)
            except Exception as e:  # noqa: BLE001 - too little variety for the evaluator
                entry["skipped"] = f"PED-ANOVA could not rank: {e}"
        out.append(entry)
    return out

