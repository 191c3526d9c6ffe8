"""What an experiment folder holds: its trials, their states and metrics, and the best one."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .schema import Experiment, ExperimentError


@dataclass
class TrialRow:
    trial_id: str
    state: str             # Tune's trial state: TERMINATED, ERROR, RUNNING, PENDING, PAUSED
    status: str            # the trial's own: ok, diverged, infeasible ("" before any report)
    epoch: int
    metrics: dict[str, Any]
    params: dict[str, Any]
    config: dict[str, Any]
    checkpoint: str | None  # folder holding checkpoint.pt
    error: str = ""         # an errored trial's error (last line of its error file)
    error_file: str = ""    # that file, inside the experiment folder
    path: str = ""          # the trial's folder in the experiment folder
    reserved: dict[str, float] | None = None  # what Tune reserved for the trial (Ray resource names)


def _checkpoint_of(trial) -> str | None:
    ckpt = getattr(trial, "checkpoint", None)
    if ckpt is not None:
        return ckpt.path
    path = (trial.last_result or {}).get("checkpoint_path")  # a TorchTrainer trial's, via TuneReportCallback
    return path


def _error_of(trial) -> tuple[str, str]:
    path = Path(trial.path) / "error.txt" if trial.path else None
    if path is None or not path.is_file():
        return "", ""
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return (lines[-1] if lines else "(empty error file)"), str(path)


def _reserved(trial) -> dict[str, float]:
    pgf = getattr(trial, "placement_group_factory", None)
    return {k: v for k, v in (pgf.required_resources if pgf else {}).items() if v}


def reserved_text(reserved: dict[str, float] | None) -> str:
    """{'CPU': 3.0, 'GPU': 1.0} -> 'CPU 3, GPU 1' (accelerator types shortened to their name)."""
    parts = [k.split(":", 1)[1] if k.startswith("accelerator_type:") else f"{k} {v:g}"
             for k, v in (reserved or {}).items()]
    return ", ".join(parts) or "-"


def trials(exp: Experiment) -> list[TrialRow]:
    from ray.tune import ExperimentAnalysis
    analysis = ExperimentAnalysis(str(exp.exp_dir))
    rows = []
    for t in analysis.trials:
        last = dict(t.last_result or {})
        rows.append(TrialRow(t.trial_id, t.status, str(last.get("status", "")), int(last.get("epoch", 0) or 0), last,
                             exp.params_of(t.config), dict(t.config), _checkpoint_of(t),
                             *_error_of(t), str(t.path or ""), _reserved(t)))
    return rows



def _value(row: TrialRow, metric: str, mode: str) -> float:
    v = row.metrics.get(metric)
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return -math.inf
    return v if mode == "max" else -v


def pareto_front(rows: list[TrialRow], metrics: list[str], modes: list[str]) -> list[TrialRow]:
    def dominates(a: TrialRow, b: TrialRow) -> bool:
        va = [_value(a, m, d) for m, d in zip(metrics, modes)]
        vb = [_value(b, m, d) for m, d in zip(metrics, modes)]
        return all(x >= y for x, y in zip(va, vb)) and any(x > y for x, y in zip(va, vb))
    return [r for r in rows if not any(dominates(o, r) for o in rows if o is not r)]


def select(exp: Experiment, rows: list[TrialRow], rule: str | None = None) -> TrialRow:
    """The best trial with status ok and a checkpoint.  rule: None (the first objective;
    with two objectives, the Pareto-optimal trial best on it), 'METRIC:min|max' (the
    Pareto-optimal, or overall, trial best on that metric) or 'trial:ID'."""
    ok = [r for r in rows if r.status == "ok" and r.checkpoint]
    if rule and rule.startswith("trial:"):
        match = [r for r in rows if r.trial_id == rule[6:]]
        if not match or not match[0].checkpoint:
            raise ExperimentError(str(exp.exp_dir), [(f"--select {rule}: no such trial with a checkpoint; "
                                                     f"see `tuner status {exp.exp_dir}`")])
        return match[0]
    if not ok:
        raise ExperimentError(str(exp.exp_dir), ["no trial finished an epoch with status ok and a checkpoint"])
    if exp.second_objective:
        # Trials ASHA stopped early carry partial figures (a short epoch_s, say): the
        # front is drawn from finished trials when there are any.
        finished = [r for r in ok if r.epoch >= exp.budget.max_epochs]
        pool = pareto_front(finished or ok, exp.metrics, exp.modes)
    else:
        pool = ok
    metric, mode = exp.metric, str(exp.mode)
    if rule:
        metric, _, mode = rule.partition(":")
        if mode not in ("min", "max"):
            raise ExperimentError(str(exp.exp_dir), [f"--select {rule!r}: write METRIC:min, METRIC:max or trial:ID"])
    return max(pool, key=lambda r: _value(r, metric, mode))
