"""Trial histories for the report: each trial's result.json rows, its final value, and the trials ranked."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .results import TrialRow, trials
from .schema import Experiment
from .text import finite


@dataclass
class Trial:
    row: TrialRow
    history: list[dict[str, Any]] = field(default_factory=list)   # result.json rows, by epoch

    def value_at(self, epoch: int, metric: str) -> float | None:
        for r in self.history:
            if r.get("epoch") == epoch and r.get("status") == "ok":
                v = r.get(metric)
                return float(v) if finite(v) else None
        return None

    def known_at(self, epoch: int, metric: str) -> float:
        """value_at, NaN where there is none (for trials already filtered to those with one)."""
        v = self.value_at(epoch, metric)
        return math.nan if v is None else v


def load(exp: Experiment) -> list[Trial]:
    out = []
    for row in trials(exp):
        history = []
        path = Path(row.path) / "result.json" if row.path else None
        if path and path.is_file():
            for line in path.read_text().splitlines():
                if line.strip():
                    history.append(json.loads(line))
        history.sort(key=lambda r: (r.get("timestamp", 0), r.get("epoch", 0)))
        out.append(Trial(row, history))
    return out


def better(a: float, b: float, mode: str) -> bool:
    return a > b if mode == "max" else a < b


def final_value(t: Trial, metric: str) -> float | None:
    v = t.row.metrics.get(metric)
    return float(v) if t.row.status == "ok" and finite(v) else None


def final_known(t: Trial, metric: str) -> float:
    """final_value, NaN where there is none (for trials already filtered to those with one)."""
    v = final_value(t, metric)
    return math.nan if v is None else v


def ranked(exp: Experiment, ts: list[Trial]) -> list[Trial]:
    """Trials with status ok and a finite last value, best first."""
    ok = [t for t in ts if final_value(t, exp.metric) is not None]
    return sorted(ok, key=lambda t: final_known(t, exp.metric), reverse=exp.mode == "max")

