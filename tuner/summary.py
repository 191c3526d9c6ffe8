"""The end-of-run summary: the best trial, errors and unfinished trials, written as summary.json."""
from __future__ import annotations

import json
from typing import Any

from tuner.experiment import pull, write_file
from tuner.schema import Experiment
from tuner.text import last_line


def summarize(exp: Experiment, results) -> dict[str, Any]:
    """The best trial by the experiment's metric (last reported value), as plain values."""
    errors = [last_line(str(r.error)) for r in results if r.error]
    try:
        best = results.get_best_result(metric=exp.metric, mode=exp.mode, scope="last", filter_nan_and_inf=True)
    except RuntimeError:
        best = None
    from .results import trials
    pull(exp)
    unfinished = [t.trial_id for t in trials(exp) if t.state not in ("TERMINATED", "ERROR")]
    out = {"exp_dir": exp.location, "trials": len(results), "errors": errors, "unfinished": unfinished,
           "best": None}
    if best is not None and best.metrics and best.metrics.get(exp.metric) is not None:
        params = exp.params_of(best.config)
        out["best"] = {"metric": exp.metric, "value": best.metrics.get(exp.metric),
                       "epoch": best.metrics.get("epoch"), "params": params, "path": best.path}
    write_file(exp, "summary.json", json.dumps(out, indent=1, default=str))
    return out

