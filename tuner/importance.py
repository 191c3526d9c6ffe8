"""Parameter importance per ASHA rung (Optuna's PED-ANOVA over every trial that reached the rung)."""
from __future__ import annotations

from typing import Any

from .history import Trial
from .schema import Experiment, SearchEntry

MIN_RUNG_TRIALS = 8        # parameter importance is computed for a rung only with at least this many trials


def entries(exp: Experiment) -> dict[str, SearchEntry]:
    """The searched settings by parameter name (a branch's as `lr[optimizer=sgd]`)."""
    return {p.name: p.entry for p in exp.searched}


def distributions(exp: Experiment) -> dict[str, Any]:
    from .space import distribution
    return {n: distribution(e) for n, e in entries(exp).items()}


def importance_by_rung(exp: Experiment, ts: list[Trial], min_trials: int = MIN_RUNG_TRIALS) -> list[dict[str, Any]]:
    """PED-ANOVA importance per ASHA rung, from an in-memory study per rung whose COMPLETE trials
    are every trial that reached the rung, valued there.  Rungs with fewer than
    `min_trials` trials are listed as skipped."""
    import optuna
    from optuna.importance import PedAnovaImportanceEvaluator
    optuna.logging.set_verbosity(optuna.logging.WARNING)   # no line per in-memory study
    dists = distributions(exp)
    levels = sorted(set(list(exp.budget.rungs)
                        + [exp.budget.max_epochs]))
    out = []
    for r in levels:
        reached = [(t, t.value_at(r, exp.metric)) for t in ts]
        reached = [(t, v) for t, v in reached if v is not None]
        entry: dict[str, Any] = {"rung": r, "n": len(reached), "importance": None, "skipped": ""}
        if len(reached) < min_trials:
            entry["skipped"] = f"{len(reached)} trial(s) < {min_trials}"
        else:
            study = optuna.create_study(direction="maximize" if exp.mode == "max" else "minimize")
            for t, v in reached:
                # A conditional space: each trial has the parameters of the branches it took;
                # the importance covers those every trial has.
                params = {n: (int(t.row.params[n]) if isinstance(d, optuna.distributions.IntDistribution)
                              else t.row.params[n]) for n, d in dists.items() if n in t.row.params}
                study.add_trial(optuna.trial.create_trial(params=params, distributions={n: dists[n] for n in params},
                                                          value=v))
            try:
                entry["importance"] = optuna.importance.get_param_importances(
                    study, evaluator=PedAnovaImportanceEvaluator(), normalize=True)
            except Exception as e:  # noqa: BLE001 - too little variety for the evaluator
                entry["skipped"] = f"PED-ANOVA could not rank: {e}"
        out.append(entry)
    return out

