"""next.yaml: the experiment again with each numeric range narrowed around the best trials (and
widened at an edge the best trial sits on)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from .history import Trial
from .schema import TRAIN_BOUNDS, Experiment, SearchEntry
from .text import finite, sig4

TOP_K = 5                  # trials whose span next.yaml keeps


PAD = 0.25                 # next.yaml pads the top-k span by this share of it on each side (in the setting's scale)


ZERO_SPAN_PAD = 0.05       # ... or by this share of the searched range when the top-k agree on one value


WIDEN = 0.5                # a best value at an edge moves that edge out by this share of the range (its scale)


EDGE = 0.05                # "at the edge": within this share of the range from a bound (its scale)


def _log(e: SearchEntry) -> bool:
    return e.type == "loguniform"


def position(e: SearchEntry, v: float) -> float:
    """Where v lies in the searched range, 0..1, in the range's own scale."""
    lo, hi = e.lo, e.hi
    if _log(e):
        lo, hi, v = math.log(lo), math.log(hi), math.log(max(v, 1e-300))
    return 0.5 if hi == lo else (v - lo) / (hi - lo)


def at_edge(e: SearchEntry, v: Any) -> str | None:
    if e.type == "choice" or not finite(v):
        return None
    p = position(e, float(v))
    return "lower" if p <= EDGE else "upper" if p >= 1 - EDGE else None


def common_rung(exp: Experiment, ts: list[Trial], k: int) -> int:
    """The highest epoch among ASHA's rungs and the last epoch that at least k trials reached
    with status ok (all of them when fewer than k finished their first rung)."""
    levels = list(exp.budget.rungs)
    levels = sorted(set(levels + [exp.budget.max_epochs]), reverse=True)
    for r in levels:
        if sum(t.value_at(r, exp.metric) is not None for t in ts) >= k:
            return r
    return levels[-1]


def top_k(exp: Experiment, ts: list[Trial], k: int = TOP_K) -> tuple[int, list[Trial]]:
    rung = common_rung(exp, ts, k)
    there = [t for t in ts if t.value_at(rung, exp.metric) is not None]
    there.sort(key=lambda t: t.known_at(rung, exp.metric), reverse=exp.mode == "max")
    return rung, there[:k]


def _clip_to_setting(name: str, lo: float, hi: float) -> tuple[float, float]:
    """[lo, hi] inside the setting's valid range (an open bound is kept a hair's width away)."""
    b = TRAIN_BOUNDS.get(name, {})
    if "ge" in b:
        lo = max(lo, b["ge"])
    if "le" in b:
        hi = min(hi, b["le"])
    if "gt" in b and lo <= b["gt"]:
        lo = b["gt"] + (hi - b["gt"]) * 1e-3
    if "lt" in b and hi >= b["lt"]:
        hi = b["lt"] - (b["lt"] - lo) * 1e-3
    return lo, hi


def narrowed(name: str, e: SearchEntry, values: list[float], best: float) -> tuple[SearchEntry, str]:
    """The range of `name` around `values` (the top-k trials'), padded by PAD, kept inside the
    searched range unless the best sits at one of its edges, and inside the setting's bounds."""
    to = (lambda v: math.log(v)) if _log(e) else (lambda v: v)
    back = (lambda v: math.exp(v)) if _log(e) else (lambda v: v)
    lo0, hi0 = to(e.lo), to(e.hi)
    lo, hi = min(to(v) for v in values), max(to(v) for v in values)
    pad = PAD * (hi - lo) if hi > lo else ZERO_SPAN_PAD * (hi0 - lo0)
    lo, hi = max(lo - pad, lo0), min(hi + pad, hi0)
    edge = at_edge(e, best)
    if edge == "lower":
        lo = lo0 - WIDEN * (hi0 - lo0)
    elif edge == "upper":
        hi = hi0 + WIDEN * (hi0 - lo0)
    new_lo, new_hi = _clip_to_setting(name, back(lo), back(hi))
    if e.type == "int":
        new_lo, new_hi = math.floor(new_lo), math.ceil(new_hi)
    else:
        new_lo, new_hi = float(f"{new_lo:.4g}"), float(f"{new_hi:.4g}")
        new_lo, new_hi = min(new_lo, min(values)), max(new_hi, max(values))  # rounding never drops a top-k value
    if not new_lo < new_hi:
        return e, "kept (the top trials leave no range)"
    how = f"widened at the {edge} edge (the best is there)" if edge else "narrowed to the top trials"
    return e.model_copy(update={"low": new_lo, "high": new_hi}), how


def next_experiment(exp: Experiment, ts: list[Trial], k: int = TOP_K) -> tuple[dict[str, Any], list[str], int, list[Trial]]:
    """(the experiment for a next search, as YAML data; one note per searched setting; the rung
    and trials it was drawn from)."""
    rung, top = top_k(exp, ts, k)
    data = exp.model_dump(mode="json", exclude_unset=True)
    data["name"] = f"{exp.name}-next"
    data.pop("storage_path", None)
    data["storage_path"] = exp.storage_path
    if exp.search:   # the next search starts from this one's trials (those inside its ranges)
        data["warm_start"] = exp.location
    notes: list[str] = []
    if not top:
        return data, ["no trial finished a rung with status ok: the space is kept as it was"], rung, top
    data["search"] = _next_space(exp.search, (), top, notes)
    return data, notes, rung, top


def _next_space(search: dict[str, SearchEntry], when: tuple, top: list[Trial], notes: list[str]) -> dict[str, Any]:
    """A space (a branch's, inside) with each numeric range narrowed to the top trials that
    drew it; a branch no top trial took is kept as it was."""
    from trainables.config import branch_name as qualified

    from .schema import branch_of
    out: dict[str, Any] = {}
    for key, e in search.items():
        name = qualified(key, when)
        if e.type == "choice":
            out[key] = e.model_dump(exclude_none=True, exclude={"branches"})
            notes.append(f"{name}: choice kept ({', '.join(map(str, e.values or []))})")
            if e.branches:
                out[key]["branches"] = {str(o): _next_space(branch_of(o, e), when + ((key, o),), top, notes)
                                        for o in e.values or [] if branch_of(o, e)}
            continue
        drew = [t for t in top if finite(t.row.params.get(name))]
        if not drew:
            out[key] = e.model_dump(exclude_none=True)
            continue
        new, how = narrowed(name, e, [float(t.row.params[name]) for t in drew], float(drew[0].row.params[name]))
        out[key] = new.model_dump(exclude_none=True)
        notes.append(f"{name}: [{sig4(e.low)}, {sig4(e.high)}] -> [{sig4(new.low)}, {sig4(new.high)}], {how}")
    return out


def write_next(exp: Experiment, ts: list[Trial], path: Path, k: int = TOP_K) -> list[str]:
    from .config import parse
    data, notes, rung, top = next_experiment(exp, ts, k)
    text = yaml.safe_dump(data, sort_keys=False)
    parse(text, str(path))  # what we write validates, or nothing is written
    head = (f"# The next search after {exp.name}: each numeric range narrowed to the top {len(top)} trials at "
            f"epoch {rung}\n# (padded by {PAD:.0%} of their span, widened only where the best sits at an edge).\n"
            f"#   python -m tuner run {path}\n" + "".join(f"#   {n}\n" for n in notes))
    path.write_text(head + text)
    return notes

