"""YAML search entries -> ray.tune domains (flat keys: OptunaSearch ignores nested ones)."""
from __future__ import annotations

from typing import Any

from ray import tune

from .config import Experiment, SearchEntry


def domain(e: SearchEntry):
    if e.type == "choice":
        return tune.choice(list(e.values))
    if e.type == "int":
        lo, hi = int(e.low), int(e.high)
        return tune.qrandint(lo, hi, int(e.q)) if e.q else tune.randint(lo, hi + 1)  # randint excludes high
    if e.type == "loguniform":
        return tune.qloguniform(e.low, e.high, e.q) if e.q else tune.loguniform(e.low, e.high)
    return tune.quniform(e.low, e.high, e.q) if e.q else tune.uniform(e.low, e.high)


def param_space(exp: Experiment) -> dict[str, Any]:
    """The fixed training settings plus one domain per searched setting, all at top level."""
    space: dict[str, Any] = dict(exp.base_config())
    for key, entry in exp.search.items():
        space[key] = domain(entry)
    return space
